package scenario

import (
	"testing"
)

// FuzzParse: any input either fails with an error or gives a scenario that
// validates and whose fleet can be built; never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("name: x\nphases: [{name: a, mode: open, rate: 10, duration: 1s}]\n"))
	f.Add([]byte("name: x\naccounts: 3\nmock: {fault_rate: 0.5}\nfailover: {ks: [0, 1], requests: 2}\n"))
	f.Add([]byte("name: x\nphases: [{name: h, mode: hold, stream: true, concurrency: 5, duration: 1s}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := Parse(src)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
		if n := s.Accounts + s.HoldProfile.Accounts; n <= 20000 && (s.Failover == nil || s.Failover.Requests <= 1000) {
			_ = s.Fleet()
		}
	})
}
