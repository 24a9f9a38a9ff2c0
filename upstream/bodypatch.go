package upstream

import (
	"bytes"
	"errors"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// errNotObject is the error of a body patch on a body that is not a JSON object.
var errNotObject = errors.New("request body is not a JSON object")

// member is one top-level member a bodyPatch sets: its key and raw JSON value.
type member struct {
	key string
	raw string
}

// bodyPatch edits the top-level members of a JSON object in one pass over
// them: members keep says no to are dropped, members named in set get their
// value replaced (or are appended when absent), and first, when set, is
// written as the object's first member (a raw `"key":value`). Every byte
// it does not change is copied as it was (nested values, spacing), and the
// caller's body is never modified. A zero bodyPatch changes nothing.
type bodyPatch struct {
	keep  func(key string) bool // nil keeps every member
	set   []member              // at most a handful: looked up by a linear scan
	first string                // raw member written first; its key must not also be in the body
}

// apply returns body patched, and the keys it dropped (in body order; nil
// when none). When nothing changes it returns body itself (no copy);
// otherwise one new slice, written in a single pass. Of duplicate keys the
// last is the one a decoder reads: a set key's value is written once, where
// the key first stood, and its repeats are dropped. err is errNotObject when
// body is not a valid JSON object.
func (p *bodyPatch) apply(body []byte) (out []byte, dropped []string, err error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !gjson.ValidBytes(body) {
		return nil, nil, errNotObject
	}
	// The string aliases body for this call only: results point into it and
	// are copied into out before it returns (gjson.ParseBytes would copy
	// the whole body first).
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	// First pass (read only): does anything change?
	changed := p.first != ""
	var seen uint64 // bit i: set[i] was found
	root.ForEach(func(k, v gjson.Result) bool {
		if p.keep != nil && !p.keep(k.Str) {
			changed = true
			return true
		}
		if i := p.setIndex(k.Str); i >= 0 {
			if seen&(1<<i) != 0 || v.Raw != p.set[i].raw {
				changed = true
			}
			seen |= 1 << i
		}
		return true
	})
	if seen != (uint64(1)<<len(p.set))-1 {
		changed = true // a set member is absent: appended
	}
	if !changed {
		return body, nil, nil
	}
	objStart := len(body) - len(trimmed)
	objEnd := bytes.LastIndexByte(body, '}')
	out = make([]byte, 0, len(body)+len(p.first)+p.extra()+1)
	out = append(out, body[:objStart+1]...)
	n := 0 // members written
	// gap writes the bytes between the previous member and the next one
	// written (whitespace and its comma), so a member whose neighbours
	// went keeps its spacing and exactly one comma separates members.
	gap := func(g []byte) {
		if n == 0 {
			if i := bytes.IndexByte(g, ','); i >= 0 {
				out = append(out, g[:i]...)
				g = g[i+1:]
			}
		} else if bytes.IndexByte(g, ',') < 0 {
			out = append(out, ',')
		}
		out = append(out, g...)
		n++
	}
	if p.first != "" {
		gap(nil)
		out = append(out, p.first...)
	}
	prev := objStart + 1
	seen = 0
	root.ForEach(func(k, v gjson.Result) bool {
		start, end := k.Index, v.Index+len(v.Raw)
		g := body[prev:start]
		prev = end
		if p.keep != nil && !p.keep(k.Str) {
			dropped = append(dropped, strings.Clone(k.Str))
			return true
		}
		i := p.setIndex(k.Str)
		if i >= 0 && seen&(1<<i) != 0 {
			return true // a repeat of a set key
		}
		gap(g)
		if i < 0 {
			out = append(out, body[start:end]...)
			return true
		}
		seen |= 1 << i
		out = append(out, body[start:v.Index]...) // the key, the colon and their spacing
		out = append(out, p.set[i].raw...)
		return true
	})
	out = append(out, body[prev:objEnd]...)
	for i, m := range p.set {
		if seen&(1<<i) == 0 {
			if n > 0 {
				out = append(out, ',')
			}
			n++
			out = appendJSONKey(out, m.key)
			out = append(out, m.raw...)
		}
	}
	return append(out, body[objEnd:]...), dropped, nil
}

// setIndex returns the index in p.set of key, or -1.
func (p *bodyPatch) setIndex(key string) int {
	for i := range p.set {
		if p.set[i].key == key {
			return i
		}
	}
	return -1
}

// extra is the most that set members may add to the body's length.
func (p *bodyPatch) extra() int {
	n := 0
	for _, m := range p.set {
		n += len(m.key) + len(m.raw) + 4
	}
	return n
}

// appendJSONKey appends `"key":`; keys are the patch's own plain ASCII names.
func appendJSONKey(dst []byte, key string) []byte {
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}
