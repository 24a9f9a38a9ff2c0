package translate

import (
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Append-style JSON writing helpers for the encoders. A key or element
// writes its own separating comma unless it follows '{' or '[' (or ':'),
// so objects are written as a sequence of key/value calls.

// comma appends ',' unless b is empty or ends in '{', '[' or ':'.
func comma(b []byte) []byte {
	if n := len(b); n > 0 {
		switch b[n-1] {
		case '{', '[', ':':
			return b
		}
		return append(b, ',')
	}
	return b
}

// key appends `"k":` (k is a constant, never escaped).
func key(b []byte, k string) []byte {
	b = comma(b)
	b = append(b, '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func kStr(b []byte, k, v string) []byte { return AppendString(key(b, k), v) }

// kStrOpt writes k only when v is not empty.
func kStrOpt(b []byte, k, v string) []byte {
	if v == "" {
		return b
	}
	return kStr(b, k, v)
}

// kStrNull writes v or null when v is empty.
func kStrNull(b []byte, k, v string) []byte {
	if v == "" {
		return append(key(b, k), "null"...)
	}
	return kStr(b, k, v)
}

func kInt(b []byte, k string, v int64) []byte { return strconv.AppendInt(key(b, k), v, 10) }

func kBool(b []byte, k string, v bool) []byte { return strconv.AppendBool(key(b, k), v) }

func kFloat(b []byte, k string, v float64) []byte {
	return strconv.AppendFloat(key(b, k), v, 'g', -1, 64)
}

// kRaw writes raw JSON text as the value.
func kRaw(b []byte, k, raw string) []byte { return append(key(b, k), raw...) }

// elem appends the separator before an array element.
func elem(b []byte) []byte { return comma(b) }

// b2s views b as a string without copying; the string is valid only while b
// is not modified (gjson results taken from it point into b).
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// getB is gjson.Get on a byte slice without the copy gjson.GetBytes makes:
// the result's strings point into b and are valid while b is.
func getB(b []byte, path string) gjson.Result { return gjson.Get(b2s(b), path) }

// rawOrEmpty returns r.Raw when r exists and is not null.
func rawOrEmpty(r gjson.Result) string {
	if !r.Exists() || r.Type == gjson.Null {
		return ""
	}
	return r.Raw
}
