package stats

import (
	"math/bits"
	"strconv"
	"time"
)

// A ring's counts live in one sorted slice of packed uint32 entries, the
// ring's arena: the slot (bucket) in the top slotBits bits, the key below
// it, the count in the rest. Sorting by slot then key keeps a slot's entries
// together (emptying a slot is one copy) and a key's entry one binary search
// away. A count that would overflow opens a second entry with the same key,
// so counts never saturate; readers sum entries per key. Tokens are kept as
// base-2^countBits digits (one entry per non-zero digit, carried on add).
//
// It is sparse on purpose: a bucket of a quiet account holds a handful of
// entries (one class, one status, a few latency bins, its tokens), 4 bytes
// each, where a dense histogram would hold hundreds of zeros; and one slice
// a ring rather than one a bucket saves a slice header (24 bytes) and a
// timestamp (8 bytes) in each of an account's 19 buckets.
type tally []uint32

const (
	slotBits  = 4 // ring slots: at most 16 (13 are used)
	keyBits   = 9
	countBits = 32 - slotBits - keyBits // 19
	countMax  = 1<<countBits - 1
	tagBits   = slotBits + keyBits

	// Key ranges: failure class, capped HTTP status, token digits, latency
	// bin, TTFT bin.
	keyClass   = 0                    // + upstream.Class (< 16)
	keyStatus  = 16                   // + statusKey(status) (< numStatusKeys)
	keyTokens  = 48                   // + kind·tokenDigits + digit
	keyLatency = 64                   // + latency bin (< numBins)
	keyTTFT    = keyLatency + numBins // + TTFT bin
	keySpace   = keyTTFT + numBins    // the number of keys in use (≤ 1<<keyBits)

	tokenKinds  = 4 // input, output, cache read, cache write
	tokenDigits = 4 // 4·19 = 76 bits: a bucket's tokens never run out
)

// tagOf is an entry's slot and key, the order the arena is sorted by.
func tagOf(e uint32) uint32 { return e >> countBits }

func tag(slot int, key uint32) uint32 { return uint32(slot)<<keyBits | key }

// find returns the index of the first entry with a tag above tg.
func (t tally) find(tg uint32) int {
	lo, hi := 0, len(t)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if tagOf(t[m]) > tg {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// insert puts e at index i, growing the arena by a quarter when it is full
// (append would double it, and a ring's arena stays at its size once its
// buckets have turned over once, so the slack would be kept for good).
func (t *tally) insert(i int, e uint32) {
	s := *t
	if len(s) == cap(s) {
		n := make(tally, len(s), len(s)+len(s)/4+4)
		copy(n, s)
		s = n
	}
	s = s[:len(s)+1]
	copy(s[i+1:], s[i:])
	s[i] = e
	*t = s
}

// add counts n more of key k in slot.
func (t *tally) add(slot int, k uint32, n uint32) {
	tg := tag(slot, k)
	i := t.find(tg)
	s := *t
	if i > 0 && tagOf(s[i-1]) == tg {
		c := s[i-1] & countMax
		if room := uint32(countMax) - c; room >= n {
			s[i-1] += n
			return
		} else {
			s[i-1] += room
			n -= room
		}
	}
	t.insert(i, tg<<countBits|n)
}

// addWide adds v to the number kept as digits at keys k0..k0+tokenDigits-1
// of slot, carrying from digit to digit.
func (t *tally) addWide(slot int, k0 uint32, v uint64) {
	var carry uint64
	for d := uint32(0); d < tokenDigits && (v != 0 || carry != 0); d++ {
		add := v&countMax + carry
		v >>= countBits
		if add == 0 {
			continue
		}
		tg := tag(slot, k0+d)
		i := t.find(tg)
		s := *t
		if i > 0 && tagOf(s[i-1]) == tg {
			sum := uint64(s[i-1]&countMax) + add
			s[i-1] = tg<<countBits | uint32(sum&countMax)
			carry = sum >> countBits
			continue
		}
		t.insert(i, tg<<countBits|uint32(add&countMax))
		carry = add >> countBits
	}
}

// clear drops slot's entries (no allocation: the arena keeps its capacity).
func (t *tally) clear(slot int) {
	s := *t
	lo := s.find(tag(slot, 0) - 1)
	if slot == 0 {
		lo = 0
	}
	hi := s.find(tag(slot, keySpace-1))
	if lo == hi {
		return
	}
	n := copy(s[lo:], s[hi:])
	*t = s[:lo+n]
}

// slot returns the entries of slot.
func (t tally) slot(slot int) tally {
	lo := 0
	if slot > 0 {
		lo = t.find(tag(slot, 0) - 1)
	}
	return t[lo:t.find(tag(slot, keySpace-1))]
}

// merge adds every count of t into dst, a dense array indexed by key.
func (t tally) merge(dst *[keySpace]uint64) {
	for _, e := range t {
		dst[(e>>countBits)&(1<<keyBits-1)] += uint64(e & countMax)
	}
}

// Statuses are kept for the codes an operator acts on; any other is
// counted under its class ("2xx", "4xx", …), so a bucket's status keys stay
// bounded whatever an upstream answers.
var statusCodes = [...]int{0, 200, 400, 401, 402, 403, 404, 408, 409, 413, 422, 429, 499, 500, 501, 502, 503, 504, 520, 522, 524, 529}

const (
	numStatusKeys = len(statusCodes) + 6 // + "1xx".."5xx" and "other"
	statusOther   = uint8(numStatusKeys - 1)
)

// statusIndex maps 0..599 to its key in the status range.
var statusIndex = func() (ix [600]uint8) {
	for st := range ix {
		ix[st] = uint8(len(statusCodes) + st/100 - 1)
		if st < 100 {
			ix[st] = statusOther
		}
	}
	for i, st := range statusCodes {
		ix[st] = uint8(i)
	}
	return ix
}()

func statusKey(st int) uint32 {
	if st < 0 || st >= len(statusIndex) {
		return uint32(statusOther)
	}
	return uint32(statusIndex[st])
}

// statusName is the name of a status key in a summary: the code ("429"),
// its class ("4xx") or "other".
func statusName(k int) string {
	switch {
	case k < len(statusCodes):
		return strconv.Itoa(statusCodes[k])
	case k == int(statusOther):
		return "other"
	default:
		return string(rune('0'+k-len(statusCodes)+1)) + "xx"
	}
}

// Latency bins are log-linear: exact below 4 µs, then 4 bins per power of
// two, so a bin's midpoint is within 1/8 (12.5 %) of any value in it.
// Values are microseconds from 1 µs to 2^30 µs (about 17.9 minutes); longer
// ones fall in the last bin. Four bins an octave rather than eight halve
// the entries of a busy bucket (latencies spread over 0.2–20 s fill 27 bins
// of each histogram instead of 53) for twice the error.
const (
	subBits = 2
	numBins = (30 - subBits + 1) << subBits // 116
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
