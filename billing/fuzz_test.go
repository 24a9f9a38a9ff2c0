package billing

import (
	"errors"
	"testing"
)

// FuzzParseAmount: any string either parses to micro-units that format
// back to an amount parsing to the same value, or fails with ErrAmount;
// never a panic, never another error.
func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"0", "12.50", "-0.000001", "+3", "9223372036854.775807", "9223372036854.775808", "1e3", "1.0000001", ".5", "5.", "", "-", "0x10", " 1", "１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseAmount(s)
		if err != nil {
			if !errors.Is(err, ErrAmount) {
				t.Fatalf("ParseAmount(%q): %v, not ErrAmount", s, err)
			}
			return
		}
		back, err := ParseAmount(FormatAmount(v))
		if err != nil || back != v {
			t.Fatalf("ParseAmount(%q) = %d; FormatAmount %q parses to %d, %v", s, v, FormatAmount(v), back, err)
		}
	})
}
