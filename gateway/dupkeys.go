package gateway

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// duplicateKeyPath reports whether an object of JSON document body repeats
// a key, at any depth, and the path of the first such key (keys and array
// indexes joined by dots; "" for a repeated empty key at the top level).
// body must be valid JSON, nested no deeper than maxJSONDepth (parseBody
// checked both).
//
// A request is refused when its body repeats a key (parseBody): the
// gateway's routing and estimates read the first occurrence (gjson) and an
// upstream's decoder the last, so a body could be routed, held and
// estimated on one text and served, and charged, on another.
func duplicateKeyPath(body []byte) (path string, found bool) {
	keys := make([]string, 0, 32) // the keys of the objects being read, reused
	return dupIn(gjson.Parse(b2s(body)), &keys)
}

// smallObject is the most keys an object's repeats are looked for by a
// scan of the keys before; past it a set takes over, so an object of n keys
// costs O(n), not O(n²) (a 1 MB body of 100,000 keys would be 5·10⁹
// comparisons).
const smallObject = 32

// dupIn reports the path within v of its first repeated key. The path is
// built only on the way back from a find: a body without one allocates
// nothing but the key stack.
func dupIn(v gjson.Result, keys *[]string) (path string, found bool) {
	switch {
	case v.IsObject():
		start := len(*keys)
		var many map[string]struct{} // an object of more than smallObject keys
		v.ForEach(func(k, _ gjson.Result) bool {
			if many != nil {
				if _, dup := many[k.Str]; dup {
					path, found = k.Str, true
					return false
				}
				many[k.Str] = struct{}{}
				return true
			}
			for _, seen := range (*keys)[start:] {
				if seen == k.Str {
					path, found = k.Str, true
					return false
				}
			}
			*keys = append(*keys, k.Str)
			if len(*keys)-start > smallObject {
				many = make(map[string]struct{}, 2*smallObject)
				for _, seen := range (*keys)[start:] {
					many[seen] = struct{}{}
				}
			}
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
