package billing

import (
	"errors"
	"math"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

func TestParseAmount(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "12": 12_000_000, "12.5": 12_500_000, "0.000001": 1, ".5": 500_000, "-3.25": -3_250_000, "+1": 1_000_000,
		"2.50": 2_500_000, "9223372036854.775807": math.MaxInt64, "-9223372036854.775807": -math.MaxInt64,
		"0.1": 100_000, "0.3": 300_000, // exact, unlike 0.1+0.2 in floating point
	} {
		got, err := ParseAmount(in)
		if err != nil || got != want {
			t.Errorf("ParseAmount(%q) = %d, %v; want %d", in, got, err, want)
		}
		if err == nil {
			back, err := ParseAmount(FormatAmount(got))
			if err != nil || back != got {
				t.Errorf("ParseAmount(FormatAmount(%d)) = %d, %v", got, back, err)
			}
		}
	}
	for _, in := range []string{"", "-", "+", ".", "5.", "1.0000001", "1e6", "1,000", " 1", "1 ", "0x10", "9223372036854.775808", "18446744073709551616", "NaN", "١"} {
		if got, err := ParseAmount(in); !errors.Is(err, ErrAmount) {
			t.Errorf("ParseAmount(%q) = %d, %v; want ErrAmount", in, got, err)
		}
	}
}

func TestFormatAmount(t *testing.T) {
	for in, want := range map[int64]string{0: "0.000000", 1: "0.000001", -1: "-0.000001", 12_500_000: "12.500000",
		math.MinInt64: "-9223372036854.775808", math.MaxInt64: "9223372036854.775807"} {
		if got := FormatAmount(in); got != want {
			t.Errorf("FormatAmount(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestCost(t *testing.T) {
	// $1.25 / M input, $0.125 / M cached, $1.5625 / M cache write, $10 / M output.
	p := storage.Price{Input: 1_250_000, CachedInput: 125_000, CacheWrite: 1_562_500, Output: 10_000_000}
	for _, tc := range []struct {
		name string
		mult int64
		t    Tokens
		want int64
	}{
		{"nothing", 0, Tokens{}, 0},
		// 1,000,000 uncached input at 1.25 = 1.25 units.
		{"a million input", 0, Tokens{Input: 1_000_000}, 1_250_000},
		// 200 uncached × 1.25 + 800 cached × 0.125 + 300 output × 10 = 250 + 100 + 3000 = 3350 micro… /1e6 per token
		{"mixed", 0, Tokens{Input: 1000, Cached: 800, Output: 300}, (200*1_250_000 + 800*125_000 + 300*10_000_000 + 500_000) / 1_000_000},
		{"cache write", 0, Tokens{Input: 1000, CacheWrite: 1000}, 1563}, // 1562.5 rounds half up
		{"one token rounds half up", 0, Tokens{Output: 1}, 10},
		{"below half a micro-unit rounds down", 0, Tokens{Input: 1, Cached: 1}, 0}, // 0.125 micro-units
		{"group ×0.8", 800_000, Tokens{Input: 1_000_000}, 1_000_000},
		{"group ×2", 2_000_000, Tokens{Output: 3}, 60},
		{"cached beyond input counts as cached", 0, Tokens{Input: 10, Cached: 20}, 3}, // 20 × 0.125 = 2.5 → 3
		{"negative counts are 0", 0, Tokens{Input: -5, Output: -5}, 0},
		{"huge clamps", 0, Tokens{Output: math.MaxInt64}, math.MaxInt64},
	} {
		if got := Cost(p, tc.mult, tc.t); got != tc.want {
			t.Errorf("%s: Cost = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := DefaultCacheWrite(1_250_000); got != 1_562_500 {
		t.Errorf("DefaultCacheWrite(1.25) = %d", got)
	}
	if got := DefaultCacheWrite(math.MaxInt64 / 2); got != math.MaxInt64 { // never wrapped to a small price
		t.Errorf("DefaultCacheWrite(MaxInt64/2) = %d, want MaxInt64", got)
	}
	if got := DefaultCacheWrite(3); got != 4 { // 3.75 → 4
		t.Errorf("DefaultCacheWrite(3) = %d", got)
	}
}
