package stats

import (
	"math/bits"
	"time"
)

// A tally is a multiset of small keys (below 1<<keyBits) with counts, kept
// as a sorted slice of packed uint32 entries: key in the top keyBits bits,
// count in the rest. A count that would overflow opens a second entry with
// the same key, so counts never saturate; readers sum entries per key.
// It is sparse on purpose: a bucket of a quiet account holds a handful of
// entries (one class, one status, a few latency bins), 4 bytes each, where a
// dense histogram would hold hundreds of zeros.
type tally []uint32

const (
	keyBits   = 11
	countBits = 32 - keyBits
	countMax  = 1<<countBits - 1

	// Key ranges: failure class, HTTP status, latency bin, TTFT bin.
	keyClass   = 0    // + upstream.Class (< 16)
	keyStatus  = 16   // + status code (0..999; 0: no answer)
	keyLatency = 1024 // + latency bin (< numBins)
	keyTTFT    = keyLatency + numBins
)

// add counts n more of key k.
func (t *tally) add(k uint32, n uint32) {
	s := *t
	// The entry with room for k is the last one with key k.
	lo, hi := 0, len(s) // binary search: i is the first entry with a key above k
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m]>>countBits > k {
			hi = m
		} else {
			lo = m + 1
		}
	}
	i := lo
	if i > 0 && s[i-1]>>countBits == k {
		c := s[i-1] & countMax
		if room := countMax - c; room >= n {
			s[i-1] += n
			return
		} else {
			s[i-1] += room
			n -= room
		}
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = k<<countBits | n
	*t = s
}

// merge adds every count of o into dst, a dense array indexed by key.
func (t tally) merge(dst *[keySpace]uint64) {
	for _, e := range t {
		dst[e>>countBits] += uint64(e & countMax)
	}
}

// keySpace is the number of keys in use.
const keySpace = keyTTFT + numBins

// Latency bins are log-linear: exact below 8 µs, then 8 bins per power of
// two, so a bin's midpoint is within 1/17 (about 6 %) of any value in it.
// Values are microseconds from 1 µs to 2^30 µs (about 17.9 minutes); longer
// ones fall in the last bin.
const (
	subBits = 3
	numBins = (30 - subBits + 1) << subBits // 224
	maxUs   = 1<<30 - 1
)

// bin returns the latency bin of d.
func bin(d time.Duration) uint32 {
	v := uint64(d / time.Microsecond)
	if v > maxUs {
		v = maxUs
	}
	if v < 1<<subBits {
		return uint32(v)
	}
	e := uint(bits.Len64(v) - 1) // ≥ subBits
	sub := (v >> (e - subBits)) & (1<<subBits - 1)
	return uint32(e-subBits+1)<<subBits | uint32(sub)
}

// binMid returns the midpoint of bin b (the value a quantile in it reports).
func binMid(b uint32) time.Duration {
	if b < 1<<subBits {
		return time.Duration(b) * time.Microsecond
	}
	e := uint(b>>subBits) + subBits - 1
	sub := uint64(b & (1<<subBits - 1))
	lo := (1<<subBits | sub) << (e - subBits)
	width := uint64(1) << (e - subBits)
	return time.Duration(lo)*time.Microsecond + time.Duration(width)*time.Microsecond/2
}

// quantile returns the value at quantile q of the dense histogram h (bins
// of count n in total): the midpoint of the bin holding the ceil(q·n)-th
// smallest value. It returns 0 when n is 0.
func quantile(h []uint64, n uint64, q float64) time.Duration {
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = max(rank, 1)
	var seen uint64
	for b, c := range h {
		seen += c
		if seen >= rank {
			return binMid(uint32(b))
		}
	}
	return binMid(uint32(len(h) - 1))
}
