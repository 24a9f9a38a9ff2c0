// Package billing prices requests and holds what users' requests in flight
// may cost (docs/billing.md). Every amount is an int64 count of micro-units
// of the configured currency (1 = 0.000001); nothing here uses floating
// point.
package billing

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/troupe-gw/troupe/storage"
)

// MicroPerUnit is how many micro-units make one unit of the currency.
const MicroPerUnit = 1_000_000

// ErrAmount is wrapped by ParseAmount's errors.
var ErrAmount = errors.New("billing: not an amount")

// ParseAmount parses a decimal amount of the currency ("12", "12.5",
// "0.000001", "-3.25", "+1") into micro-units exactly, without floating
// point. At most six digits after the point; no exponent, no thousands
// separators, at most 9,223,372,036,854.775807. The error wraps ErrAmount
// and quotes s.
func ParseAmount(s string) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("%w: %q: %s (want a decimal amount of the currency, not micro-units, with at most 6 digits after the point: 12.50 is twelve and a half units, 0.000001 one micro-unit)", ErrAmount, s, why)
	}
	t := s
	neg := false
	if t != "" && (t[0] == '-' || t[0] == '+') {
		neg = t[0] == '-'
		t = t[1:]
	}
	whole, frac, dot := strings.Cut(t, ".")
	if whole == "" && frac == "" {
		return bad("no digits")
	}
	if dot && frac == "" || len(frac) > 6 {
		return bad("bad digits after the point")
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return bad("not a digit")
			}
		}
	}
	var w uint64
	if whole != "" {
		v, err := strconv.ParseUint(whole, 10, 64)
		if err != nil {
			return bad("too large")
		}
		w = v
	}
	f := uint64(0)
	if frac != "" {
		v, _ := strconv.ParseUint(frac, 10, 64) // at most 6 digits
		for i := len(frac); i < 6; i++ {
			v *= 10
		}
		f = v
	}
	hi, lo := bits.Mul64(w, MicroPerUnit)
	lo, carry := bits.Add64(lo, f, 0)
	if hi != 0 || carry != 0 || lo > math.MaxInt64 {
		return bad("too large")
	}
	if neg {
		return -int64(lo), nil
	}
	return int64(lo), nil
}

// FormatAmount writes micro-units as a decimal amount with six digits after
// the point ("12.500000", "-0.000001"): ParseAmount reads it back exactly.
func FormatAmount(micro int64) string {
	sign := ""
	u := uint64(micro)
	if micro < 0 {
		sign = "-"
		u = uint64(-(micro + 1)) + 1 // math.MinInt64 too
	}
	return fmt.Sprintf("%s%d.%06d", sign, u/MicroPerUnit, u%MicroPerUnit)
}

// Tokens are the token counts a request is priced on, as its usage record
// has them: Input counts every input token, of which Cached were read from
// the prompt cache and CacheWrite written to it; Output counts every output
// token (reasoning included).
type Tokens struct {
	Input, Cached, CacheWrite, Output int64
}

// DefaultCacheWrite is the cache-write price when none is set: input × 1.25,
// rounded half up to a micro-unit; math.MaxInt64 when that is beyond int64
// (a price storage refuses anyway, never one wrapped around to a small one).
func DefaultCacheWrite(input int64) int64 {
	if input > (math.MaxInt64-2)/5 {
		return math.MaxInt64
	}
	return (input*5 + 2) / 4
}

// UnitMultiplier is the group multiplier of ×1, in parts per million.
const UnitMultiplier = 1_000_000

// Cost returns what t costs at price p with the group multiplier mult (parts
// per million; UnitMultiplier when <= 0), in micro-units:
//
//	(uncached×Input + Cached×CachedInput + CacheWrite×CacheWrite + Output×Output) × mult / 10^12
//
// where uncached = Input − Cached − CacheWrite (never below 0), computed in
// 128-bit integers and rounded once, half up, per request. Negative counts
// count as 0. A result beyond int64 is clamped to math.MaxInt64.
func Cost(p storage.Price, mult int64, t Tokens) int64 {
	if mult <= 0 {
		mult = UnitMultiplier
	}
	in, cached, write, out := max(t.Input, 0), max(t.Cached, 0), max(t.CacheWrite, 0), max(t.Output, 0)
	uncached := max(in-cached-write, 0)
	var hi, lo uint64
	add := func(n, price int64) {
		h, l := bits.Mul64(uint64(n), uint64(max(price, 0)))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	add(uncached, p.Input)
	add(cached, p.CachedInput)
	add(write, p.CacheWrite)
	add(out, p.Output)
	// × mult: (hi, lo) × m, keeping 128 bits (sums of four 126-bit products
	// times a multiplier below 2^63 would overflow only for absurd counts;
	// then the result is clamped).
	h1, l1 := bits.Mul64(lo, uint64(mult))
	h2, l2 := bits.Mul64(hi, uint64(mult))
	if h2 != 0 {
		return math.MaxInt64
	}
	h1, c := bits.Add64(h1, l2, 0)
	if c != 0 {
		return math.MaxInt64
	}
	// + 10^12/2, then / 10^12.
	const denom = 1_000_000_000_000
	l1, c = bits.Add64(l1, denom/2, 0)
	h1 += c
	if h1 >= denom {
		return math.MaxInt64
	}
	q, _ := bits.Div64(h1, l1, denom)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
