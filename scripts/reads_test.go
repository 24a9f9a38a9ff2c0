package scripts

import (
	"testing"
)

func TestReadsOf(t *testing.T) {
	cases := []struct {
		name, src string
		want      Fields
	}{
		{"none", `function score(a, now) return a.priority end`, 0},
		{"attribute", `function score(a, now) return -a.inflight end`, FieldInFlight},
		{"constant key", `function score(a, now) return a["requests"] end`, FieldRequests},
		{"string literal", `local k = "success_streak" function score(a, now) return 1 end`, FieldSuccessStreak},
		{"long string key", `function score(a, now) return a[ [[failures]] ] end`, FieldFailures},
		{"several", `function score(a) return a.ewma_latency_ms + a.ewma_ttft_ms + a.ewma_success end`, FieldEWMALatency | FieldEWMATTFT | FieldEWMASuccess},
		{"pairs", `function score(a) for k, v in pairs(a) do end return 1 end`, FieldsAll},
		{"next", `function score(a) return next(a) and 1 end`, FieldsAll},
		{"built key", `function score(a) local k = "in" .. "flight" return a[k] end`, FieldsAll},
		{"built by method", `function score(a) local k = ("xinflight"):sub(2) return a[k] end`, FieldsAll},
		{"built by library", `function score(a) return a[string.lower("INFLIGHT")] end`, FieldsAll},
		{"dynamic index without strings", `function score(a) local w = a.usage_windows for i = 1, #w do local x = w[i] end return 1 end`, 0},
		{"strings without dynamic index", `function route(r) return {sticky_key = r.model .. "x"} end function score(a) return 1 end`, 0},
		{"name in a comment is not a read", "-- inflight\nfunction score(a) return 1 end", 0},
	}
	for _, c := range cases {
		if got := scanSource(c.src).reads; got != c.want {
			t.Errorf("%s: readsOf = %09b, want %09b", c.name, got, c.want)
		}
	}
}

// TestShippedPolicyReads pins what each shipped policy reads, so a change
// that makes one rescore on every lease shows up here.
func TestShippedPolicyReads(t *testing.T) {
	for name, want := range map[string]Fields{
		"smart":          FieldSuccesses | FieldFailures | FieldSuccessStreak | FieldFailureStreak | FieldEWMASuccess | FieldEWMALatency,
		"round_robin":    0,
		"least_inflight": FieldInFlight,
	} {
		src, ok := Builtin(name)
		if !ok {
			t.Fatalf("no built-in %s", name)
		}
		p, err := Compile(name, src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Reads(); got != want {
			t.Errorf("%s reads %09b, want %09b", name, got, want)
		}
		c, err := p.Clone()
		if err != nil || c.Reads() != p.Reads() {
			t.Errorf("%s: clone reads %v (%v)", name, c.Reads(), err)
		}
	}
}
