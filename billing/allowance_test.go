package billing

import (
	"math"
	"testing"
)

// TestOutputAllowance: the output an estimate counts is Choices × the
// larger of the cap and the output estimate (a codex account drops the
// cap), saturating at MaxOutputAllowance.
func TestOutputAllowance(t *testing.T) {
	for _, tc := range []struct {
		r    Request
		want int64
	}{
		{Request{}, 1024},
		{Request{MaxOutput: 10}, 1024},
		{Request{MaxOutput: 1}, 1024},
		{Request{MaxOutput: 1025}, 1025},
		{Request{MaxOutput: 10, Choices: 100}, 102400},
		{Request{MaxOutput: 2000, Choices: 100}, 200000},
		{Request{Choices: 3}, 3 * 1024},
		{Request{MaxOutput: -5, Choices: -2}, 1024},
		{Request{MaxOutput: MaxOutputAllowance, Choices: 1}, MaxOutputAllowance},
		{Request{MaxOutput: MaxOutputAllowance, Choices: 2}, MaxOutputAllowance},
		{Request{MaxOutput: math.MaxInt64, Choices: math.MaxInt64}, MaxOutputAllowance},
		{Request{MaxOutput: 1 << 21, Choices: 1 << 20}, MaxOutputAllowance},
		{Request{MaxOutput: 1<<20 - 1, Choices: 1 << 20}, (1<<20 - 1) << 20},
	} {
		if got := outputAllowance(tc.r, 1024); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.r, got, tc.want)
		}
	}
}
