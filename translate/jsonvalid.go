package translate

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"sync"

	"github.com/tidwall/gjson"
)

// maxValidDepth is the deepest nesting ValidWithin tracks in its own bit
// stack (eight words on the caller's stack); a larger limit falls back to
// DepthExceeds and gjson.ValidBytes.
const maxValidDepth = 512

// ValidWithin reports whether b is one valid JSON text (exactly what
// gjson.ValidBytes accepts: RFC 8259's grammar, whitespace ' ', '\t', '\n'
// and '\r', no check of UTF-8) that nests arrays and objects at most limit
// levels deep: the same answer as !DepthExceeds(b, limit) &&
// gjson.ValidBytes(b) (FuzzValidWithin), in one non-recursive pass instead
// of two, so it is safe on hostile input of any size. It allocates nothing
// for limit ≤ 512.
//
// The gateway checks every request body and every non-stream answer with
// it before parsing them (docs/benchmarks.md, issue 21: the two passes were
// about 7,000 instructions of a small Chat request's round trip).
func ValidWithin(b []byte, limit int) bool {
	if limit > maxValidDepth {
		return !DepthExceeds(b, limit) && gjson.ValidBytes(b)
	}
	return validWithin(b, limit, nil)
}

// ValidWithinKeys is ValidWithin that also reports, in the same pass,
// whether an object of b may repeat a key. mayRepeat false means that no
// object of the valid text b repeats a key, at any depth, keys compared as
// gjson unescapes them (what gjson's ForEach gives as a key's Str);
// true means that one does, or that b was not checked (b not valid, or
// limit above 512). The gateway refuses a body that repeats a key and
// names the first by its path (duplicateKeyPath): it runs that only when
// mayRepeat is true, not on every body (issue 21).
//
// It allocates nothing for a body whose open objects hold at most 32 keys
// together and nest at most 32 deep, and none of whose keys has an escape
// (its key stack comes from a pool).
func ValidWithinKeys(b []byte, limit int) (valid, mayRepeat bool) {
	if limit > maxValidDepth {
		return !DepthExceeds(b, limit) && gjson.ValidBytes(b), true
	}
	ks := keyScans.Get().(*keyScan)
	ks.keys, ks.starts, ks.sets, ks.repeated = ks.keyBuf[:0], ks.startBuf[:0], nil, false
	valid = validWithin(b, limit, ks)
	mayRepeat = !valid || ks.repeated
	clear(ks.keyBuf[:]) // the keys point into b: keep none of it alive
	ks.keys, ks.sets = nil, nil
	keyScans.Put(ks)
	return valid, mayRepeat
}

// keyScans holds the key stacks of ValidWithinKeys between calls.
var keyScans = sync.Pool{New: func() any { return new(keyScan) }}

// keyScan is the state of ValidWithinKeys' search for a repeated key: the
// keys of the objects being read, innermost last, and where each open
// container's keys start.
type keyScan struct {
	keys     []string
	starts   []int // one an open container (arrays too, so that depth indexes it)
	sets     []map[string]struct{}
	repeated bool
	keyBuf   [32]string
	startBuf [32]int
}

// smallKeySet is the most keys an object's repeats are looked for by a
// scan of the keys before; past it a set takes over, so that an object of n
// keys costs O(n), not O(n²).
const smallKeySet = 32

// open notes a container opened at depth len(ks.starts)+1.
func (ks *keyScan) open() {
	ks.starts = append(ks.starts, len(ks.keys))
	if ks.sets != nil {
		ks.sets = append(ks.sets, nil)
	}
}

// close forgets the keys of the innermost container.
func (ks *keyScan) close() {
	d := len(ks.starts) - 1
	ks.keys = ks.keys[:ks.starts[d]]
	ks.starts = ks.starts[:d]
	if ks.sets != nil {
		ks.sets = ks.sets[:d]
	}
}

// key takes the key of the innermost object, raw as between its quotes,
// and reports whether that object has had it before.
func (ks *keyScan) key(raw []byte) bool {
	k := b2s(raw)
	if bytes.IndexByte(raw, '\\') >= 0 {
		k = gjson.Parse(`"` + k + `"`).Str // as gjson reads it; rare
	}
	d := len(ks.starts) - 1
	if d < len(ks.sets) && ks.sets[d] != nil {
		set := ks.sets[d]
		if _, ok := set[k]; ok {
			return true
		}
		set[k] = struct{}{}
		return false
	}
	mine := ks.keys[ks.starts[d]:]
	for _, seen := range mine {
		if seen == k {
			return true
		}
	}
	if len(mine) < smallKeySet {
		ks.keys = append(ks.keys, k)
		return false
	}
	// The object's keys go into a set of its own (and stay out of keys).
	for len(ks.sets) < len(ks.starts) {
		ks.sets = append(ks.sets, nil)
	}
	set := make(map[string]struct{}, 2*smallKeySet)
	for _, seen := range mine {
		set[seen] = struct{}{}
	}
	set[k] = struct{}{}
	ks.sets[d] = set
	return false
}

// validWithin is ValidWithin for limit ≤ maxValidDepth; with ks, it looks
// for a repeated key too until it finds one (ks.repeated).
func validWithin(b []byte, limit int, ks *keyScan) bool {
	var objs [maxValidDepth / 64]uint64 // bit d: the container at depth d+1 is an object
	depth := 0
	n := len(b)
	i := skipWS(b, 0)
value:
	if i >= n {
		return false
	}
	switch c := b[i]; c {
	case '{', '[':
		if depth >= limit {
			return false
		}
		word, bit := depth>>6, uint64(1)<<(depth&63)
		depth++
		i = skipWS(b, i+1)
		if c == '{' {
			objs[word] |= bit
			if i < n && b[i] == '}' {
				i++
				depth--
				goto after
			}
			if ks != nil {
				ks.open()
			}
			goto key
		}
		objs[word] &^= bit
		if i < n && b[i] == ']' {
			i++
			depth--
			goto after
		}
		if ks != nil {
			ks.open()
		}
		goto value
	case '"':
		var ok bool
		if i, ok = validString(b, i+1); !ok {
			return false
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var ok bool
		if i, ok = validNumber(b, i); !ok {
			return false
		}
	case 't':
		if i+4 > n || b[i+1] != 'r' || b[i+2] != 'u' || b[i+3] != 'e' {
			return false
		}
		i += 4
	case 'f':
		if i+5 > n || b[i+1] != 'a' || b[i+2] != 'l' || b[i+3] != 's' || b[i+4] != 'e' {
			return false
		}
		i += 5
	case 'n':
		if i+4 > n || b[i+1] != 'u' || b[i+2] != 'l' || b[i+3] != 'l' {
			return false
		}
		i += 4
	default:
		return false
	}
after:
	i = skipWS(b, i)
	if depth == 0 {
		return i == n
	}
	if i >= n {
		return false
	}
	if d := depth - 1; objs[d>>6]&(uint64(1)<<(d&63)) != 0 {
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
			goto key
		case '}':
			i++
			depth--
			if ks != nil {
				ks.close()
			}
			goto after
		}
		return false
	}
	switch b[i] {
	case ',':
		i = skipWS(b, i+1)
		goto value
	case ']':
		i++
		depth--
		if ks != nil {
			ks.close()
		}
		goto after
	}
	return false
key:
	if i >= n || b[i] != '"' {
		return false
	}
	{
		start := i + 1
		var ok bool
		if i, ok = validString(b, start); !ok {
			return false
		}
		if ks != nil && ks.key(b[start:i-1]) {
			ks.repeated = true
			ks = nil // found: the rest is validation only
		}
	}
	i = skipWS(b, i)
	if i >= n || b[i] != ':' {
		return false
	}
	i = skipWS(b, i+1)
	goto value
}

// skipWS returns the index of the first byte of b at or after i that is not
// JSON whitespace (len(b) if none).
func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// plainStringByte marks the bytes a JSON string holds as they are: all but
// the control characters, '"' and '\\'.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// validString checks the rest of a JSON string whose opening quote is at
// i-1 and returns the index after its closing quote.
func validString(b []byte, i int) (int, bool) {
	for {
		// Eight bytes at a time while none of them is special: a word
		// with no byte below 0x20, no '"' and no backslash. The bit tricks
		// can flag a byte above a special one too (a borrow carries up),
		// never one below the first, so the lowest flag is the first
		// special byte: the scan goes straight to it.
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			if m := hasLess(w, 0x20) | hasZero(w^(lsb*'"')) | hasZero(w^(lsb*'\\')); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto special
			}
			i += 8
		}
		for i < len(b) && plainStringByte[b[i]] {
			i++
		}
	special:
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 5
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
}

// lsb has the lowest bit of every byte of a word set.
const lsb = 0x0101010101010101

// hasZero is nonzero exactly when a byte of w is zero.
func hasZero(w uint64) uint64 { return (w - lsb) &^ w & (lsb * 0x80) }

// hasLess is nonzero exactly when a byte of w is below n (n ≤ 128).
func hasLess(w uint64, n uint64) uint64 { return (w - lsb*n) &^ w & (lsb * 0x80) }

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// validNumber checks the JSON number starting at i and returns the index
// after it.
func validNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b) || b[i] < '0' || b[i] > '9':
		return i, false
	case b[i] == '0':
		i++
	default:
		i = skipDigits(b, i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
		i = skipDigits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
		i = skipDigits(b, i)
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
