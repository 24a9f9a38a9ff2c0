package report

import (
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/bench/scenario"
)

// TestTextHoldsAndErrors: a hold measured without the gateway's pid
// (troupe bench --target without --pid) says its memory was not measured
// instead of "RSS 0.0 MiB", and errors read as a list, not a Go map
// (newcomer's findings).
func TestTextHoldsAndErrors(t *testing.T) {
	r := &Report{Scenario: &scenario.Scenario{Name: "t"}, Holds: []Hold{
		{Name: "unmeasured", Streams: 10, Open: 9, Errors: map[string]int64{"timeout": 1}},
		{Name: "measured", Streams: 10, Open: 10, RSSBefore: 40 << 20, RSSOpen: 41 << 20, BytesPerStream: 1 << 17},
	}, Failover: []Failover{{K: 1, Requests: 5, Errors: map[string]int64{"status_502": 2, "timeout": 2, "reset": 3}}}}
	text := r.Text()
	for _, want := range []string{
		"unmeasured: 9 of 10 streams open; gateway memory not measured (no --pid); errors: timeout ×1\n",
		"measured: 10 of 10 streams open; gateway RSS 40.0 MiB → 41.0 MiB: 128.0 KiB per open stream; errors: none\n",
		"errors: reset ×3, status_502 ×2, timeout ×2\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q:\n%s", want, text)
		}
	}
	for _, bad := range []string{"map[", "RSS 0.0"} {
		if strings.Contains(text, bad) {
			t.Errorf("the summary holds %q:\n%s", bad, text)
		}
	}
	if got := ErrorList(map[string]int{}); got != "none" {
		t.Errorf("ErrorList(empty) = %q", got)
	}
}
