package admin

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// repeatedKey returns the path (keys and array indexes joined by dots) of
// the first key that an object of the JSON body b repeats, at any depth,
// or "" when none does or b is not JSON (the handler's decoder then says
// what is wrong with it). encoding/json keeps a repeated key's last value,
// while a person reading the body, or a log, may see the first: an admin
// body is refused rather than read either way.
func repeatedKey(b []byte) string {
	type frame struct {
		keys  map[string]struct{} // an object's keys so far; nil for an array
		key   string              // an object's current key
		index int                 // an array's current index
		isKey bool                // an object expects a key next
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var stack []frame
	path := func(last string) string {
		parts := make([]string, 0, len(stack)+1)
		for _, f := range stack[:len(stack)-1] {
			if f.keys != nil {
				parts = append(parts, f.key)
			} else {
				parts = append(parts, strconv.Itoa(f.index))
			}
		}
		return strings.Join(append(parts, last), ".")
	}
	// value notes that a value ended in the innermost frame.
	value := func() {
		if n := len(stack); n > 0 {
			if f := &stack[n-1]; f.keys != nil {
				f.isKey = true
			} else {
				f.index++
			}
		}
	}
	for {
		tok, err := d.Token()
		if err != nil {
			return ""
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil && stack[n-1].isKey {
			if k, ok := tok.(string); ok {
				f := &stack[n-1]
				if _, dup := f.keys[k]; dup {
					return path(k)
				}
				f.keys[k], f.key, f.isKey = struct{}{}, k, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]struct{}{}, isKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return ""
			}
			value()
		default:
			if len(stack) == 0 {
				return ""
			}
			value()
		}
	}
}

// refuseRepeatedKeys answers 400 naming the path of the key that a JSON
// request body repeats (repeatedKey) and reports true; false when the body
// repeats none.
func refuseRepeatedKeys(ctx *fasthttp.RequestCtx) bool {
	body := ctx.Request.Body()
	if len(body) == 0 {
		return false
	}
	p := repeatedKey(body)
	if p == "" {
		return false
	}
	writeError(ctx, errBadParam(p, "The JSON body repeats the key "+strconv.Quote(p)+": each key may appear once in an object."))
	return true
}
