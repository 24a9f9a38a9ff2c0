package scripts

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestKnobs(t *testing.T) {
	p := mustCompile(t, "knobs", `
policy = {
  description = "test",
  top_k = 5,
  jitter = 0.25,
  score_band = 10,
  tie_break = { "priority", "least_inflight", "id" },
  concurrency = { healthy = "max", warm = "50%", risky = 2 },
  sticky_ttl = 600,
  max_attempts = 4,
}
function score() return 1 end`)
	k := p.Knobs()
	if k.Description != "test" || k.TopK != 5 || k.Jitter != 0.25 || k.ScoreBand != 10 || k.StickyTTL != 10*time.Minute || k.MaxAttempts != 4 {
		t.Fatalf("knobs = %+v", k)
	}
	if want := []TieBreak{TiePriority, TieLeastInflight, TieID}; !slices.Equal(k.TieBreak, want) {
		t.Fatalf("tie_break = %v", k.TieBreak)
	}
	if k.Concurrency != [NumTiers]Share{{Fraction: 1}, {Fraction: 0.5}, {Absolute: 2}} {
		t.Fatalf("concurrency = %+v", k.Concurrency)
	}

	// score_band 10: (90, 100] is one band, (80, 90] the next.
	for score, band := range map[float64]float64{100: 10, 99.5: 10, 90.01: 10, 90: 9, 81: 9, 0: 0, -5: 0, -15: -1} {
		if got := k.Band(score); got != band {
			t.Errorf("Band(%v) = %v, want %v", score, got, band)
		}
	}

	d := mustCompile(t, "defaults", "function score() return 1 end").Knobs()
	if d.ScoreBand != 0 || d.Band(97.25) != 97.25 {
		t.Fatalf("default score_band %v: Band(97.25) = %v, want the score", d.ScoreBand, d.Band(97.25))
	}
	if d.TopK != 1 || d.Jitter != 0 || !slices.Equal(d.TieBreak, []TieBreak{TieLeastRecent}) || d.StickyTTL != DefaultStickyTTL || d.MaxAttempts != 0 {
		t.Fatalf("defaults = %+v", d)
	}
	for tier := range Tier(NumTiers) {
		if d.Limit(tier, 6) != 6 {
			t.Fatalf("default Limit(%v, 6) = %d", tier, d.Limit(tier, 6))
		}
	}
}

func TestShare(t *testing.T) {
	cases := []struct {
		in    string
		share Share
		str   string
		max   int
		limit int
	}{
		{`"max"`, Share{Fraction: 1}, "max", 8, 8},
		{`"max/2"`, Share{Fraction: 0.5}, "max/2", 8, 4},
		{`"max/2"`, Share{Fraction: 0.5}, "max/2", 1, 1}, // at least one
		{`"max/3"`, Share{Fraction: 1.0 / 3}, "max/3", 8, 2},
		{`"25%"`, Share{Fraction: 0.25}, "max/4", 10, 2},
		{`"30%"`, Share{Fraction: 0.3}, "30%", 10, 3},
		{`1`, Share{Absolute: 1}, "1", 8, 1},
		{`16`, Share{Absolute: 16}, "16", 8, 8}, // never above max_inflight
		{`1`, Share{Absolute: 1}, "1", 0, 0},
	}
	for _, c := range cases {
		p := mustCompile(t, "share", "policy = { concurrency = { warm = "+c.in+" } }\nfunction score() return 1 end")
		s := p.Knobs().Concurrency[TierWarm]
		if math.Abs(s.Fraction-c.share.Fraction) > 1e-12 || s.Absolute != c.share.Absolute {
			t.Errorf("%s: share %+v, want %+v", c.in, s, c.share)
		}
		if s.String() != c.str {
			t.Errorf("%s: String() = %q, want %q", c.in, s.String(), c.str)
		}
		if got := s.Limit(c.max); got != c.limit {
			t.Errorf("%s: Limit(%d) = %d, want %d", c.in, c.max, got, c.limit)
		}
	}
	for _, bad := range []string{`0`, `1.5`, `"max/0"`, `"0%"`, `"150%"`, `"half"`, `{}`} {
		if _, err := Compile("share", "policy = { concurrency = { warm = "+bad+" } }\nfunction score() return 1 end", Options{}); err == nil {
			t.Errorf("concurrency %s accepted", bad)
		}
	}
}

func TestPickRank(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	k := Knobs{TopK: 3, Jitter: 0.3}
	var counts [5]int
	const n = 30000
	for range n {
		counts[k.PickRank(5, r)]++
	}
	for i, want := range []float64{0.8, 0.1, 0.1, 0, 0} {
		if got := float64(counts[i]) / n; math.Abs(got-want) > 0.01 {
			t.Errorf("rank %d: %.3f, want %.2f", i, got, want)
		}
	}
	if got := k.PickRank(1, r); got != 0 {
		t.Errorf("PickRank(1) = %d", got)
	}
	one := Knobs{TopK: 1, Jitter: 1}
	if got := one.PickRank(5, r); got != 0 {
		t.Errorf("top_k 1 picked rank %d", got)
	}
}
