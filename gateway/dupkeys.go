package gateway

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// duplicateKeyPath returns the path (keys and array indexes joined by
// dots) of the first key that an object of JSON document body repeats, at
// any depth, or "" when none does. body must be valid JSON, nested no
// deeper than maxJSONDepth (parseBody checked both).
//
// A user's request is refused when its body repeats a key (admitBilling):
// the gateway's estimates read the first occurrence (gjson) and an
// upstream's decoder the last, so a body could be held and estimated on one
// text and served, and charged, on another.
func duplicateKeyPath(body []byte) string {
	keys := make([]string, 0, 32) // the keys of the objects being read, reused
	p, _ := dupIn(gjson.Parse(b2s(body)), &keys)
	return p
}

// dupIn reports the path within v of its first repeated key. The path is
// built only on the way back from a find: a body without one allocates
// nothing but the key stack.
func dupIn(v gjson.Result, keys *[]string) (path string, found bool) {
	switch {
	case v.IsObject():
		start := len(*keys)
		v.ForEach(func(k, _ gjson.Result) bool {
			for _, seen := range (*keys)[start:] {
				if seen == k.Str {
					path, found = k.Str, true
					return false
				}
			}
			*keys = append(*keys, k.Str)
			return true
		})
		*keys = (*keys)[:start]
		if found {
			return path, true
		}
		v.ForEach(func(k, e gjson.Result) bool {
			if e.IsObject() || e.IsArray() {
				if p, ok := dupIn(e, keys); ok {
					path, found = k.Str+"."+p, true
				}
			}
			return !found
		})
	case v.IsArray():
		i := -1
		v.ForEach(func(_, e gjson.Result) bool {
			i++
			if e.IsObject() || e.IsArray() {
				if p, ok := dupIn(e, keys); ok {
					path, found = strconv.Itoa(i)+"."+p, true
				}
			}
			return !found
		})
	}
	return path, found
}
