package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// jsonDecodeError says what is wrong with a JSON body that encoding/json
// refused, in the body's terms: the field and the JSON type it needs ("name
// must be a string, not number"), the byte offset of a syntax error, or an
// unknown field; never Go type names (gateway.accountInput, []string).
func jsonDecodeError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := jsonKind(te.Type)
		if te.Field == "" {
			return "the body must be " + want + ", not " + te.Value
		}
		return te.Field + " must be " + want + ", not " + te.Value
	case errors.As(err, &se):
		return "invalid JSON at byte " + strconv.FormatInt(se.Offset, 10)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON is empty or cut short"
	}
	return clip(strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON type a Go type decodes from: a string, a number,
// a boolean, an array or an object.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a JSON value"
}

// decodeStrict decodes the JSON body b into v, refusing a field v does not
// have (the error names it: `unknown field "concurrency"`), a value of the
// wrong type, and anything after the value. A route whose body has optional
// fields uses it so that a misspelt one is a 400, not a setting dropped in
// silence. Render the error with jsonDecodeError.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// errEmptyEntry is the 400 for a list (param: "models", "tags") with an
// empty entry, nil when it has none. JSON null decodes to "" in a []string,
// so without it {"models": [null]} was kept as the model "": an allowlist
// no request matches, or an account serving no model a client can name.
func errEmptyEntry(param string, list []string) *APIError {
	for i, v := range list {
		if v == "" {
			return errBadParam(param, param+"."+strconv.Itoa(i)+" is empty (or null): every entry names one.")
		}
	}
	return nil
}
