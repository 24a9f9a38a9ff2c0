package translate

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Shared decoding helpers.

// maxDepth is the deepest JSON nesting a translated body may have.
const maxDepth = 128

// parseBody checks that body is one JSON object of sane depth and returns it.
func parseBody(body []byte, what string) (gjson.Result, error) {
	if !ValidWithin(body, maxDepth) { // one pass; which of the two it is, on failure only
		if DepthExceeds(body, maxDepth) {
			return gjson.Result{}, badRequest("", what+" nests JSON deeper than "+strconv.Itoa(maxDepth)+" levels")
		}
		return gjson.Result{}, badRequest("", what+" is not valid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return gjson.Result{}, badRequest("", what+" must be a JSON object")
	}
	return root, nil
}

// isNull reports whether r is absent or JSON null.
func isNull(r gjson.Result) bool { return !r.Exists() || r.Type == gjson.Null }

// path joins a JSON path for error messages.
func path(parent string, k any) string {
	var s string
	switch v := k.(type) {
	case int:
		s = strconv.Itoa(v)
	case string:
		s = v
	}
	if parent == "" {
		return s
	}
	return parent + "." + s
}

// wantString returns r's string or a 400 when r is present and not a string.
func wantString(r gjson.Result, param string) (string, error) {
	if isNull(r) {
		return "", nil
	}
	if r.Type != gjson.String {
		return "", badRequest(param, param+" must be a string")
	}
	return r.Str, nil
}

// wantInt returns r as a non-negative integer.
func wantInt(r gjson.Result, param string) (int64, error) {
	if isNull(r) {
		return 0, nil
	}
	if r.Type != gjson.Number || r.Num != float64(int64(r.Num)) || r.Num < 0 {
		return 0, badRequest(param, param+" must be a non-negative integer")
	}
	return int64(r.Num), nil
}

// wantFloat returns r as a number, nil when absent.
func wantFloat(r gjson.Result, param string) (*float64, error) {
	if isNull(r) {
		return nil, nil
	}
	if r.Type != gjson.Number {
		return nil, badRequest(param, param+" must be a number")
	}
	v := r.Num
	return &v, nil
}

// wantBool returns r as a bool, nil when absent.
func wantBool(r gjson.Result, param string) (*bool, error) {
	if isNull(r) {
		return nil, nil
	}
	if !r.IsBool() {
		return nil, badRequest(param, param+" must be a boolean")
	}
	v := r.Bool()
	return &v, nil
}

// wantObject returns a 400 unless r is absent, null or an object.
func wantObject(r gjson.Result, param string) error {
	if isNull(r) || r.IsObject() {
		return nil
	}
	return badRequest(param, param+" must be an object")
}

// stopList decodes a string or an array of strings.
func stopList(r gjson.Result, param string) ([]string, error) {
	if isNull(r) {
		return nil, nil
	}
	if r.Type == gjson.String {
		return []string{r.Str}, nil
	}
	if !r.IsArray() {
		return nil, badRequest(param, param+" must be a string or an array of strings")
	}
	var out []string
	var err error
	r.ForEach(func(_, v gjson.Result) bool {
		if v.Type != gjson.String {
			err = badRequest(param, param+" must be a string or an array of strings")
			return false
		}
		out = append(out, v.Str)
		return true
	})
	return out, err
}

// stopParam names the stop-sequence field of a client protocol: Chat's
// "stop", Messages' "stop_sequences" (Responses has none).
func stopParam(p Protocol) string {
	if p == Messages {
		return "stop_sequences"
	}
	return "stop"
}

// parseDataURL splits "data:<media type>;base64,<data>".
func parseDataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, b64 := strings.CutSuffix(meta, ";base64")
	if !b64 || mediaType == "" {
		return "", "", false
	}
	return mediaType, data, true
}

// imageURL returns the URL form of an image part (a data: URL for inline data).
func (p *part) imageURL() string {
	if p.url != "" {
		return p.url
	}
	return "data:" + p.mediaType + ";base64," + p.data
}

// newImage builds an image part from an OpenAI image URL u (the field at
// param), splitting a data: URL into its media type and base64 data. u must
// be a string holding an http(s) URL or a data:<media type>;base64,<data>
// URL with both parts non-empty; anything else is a 400 on param, where it
// would otherwise become an image block with no source (an empty base64
// block, or a data: URL passed as a remote one).
func newImage(u gjson.Result, param string) (part, error) {
	if u.Type != gjson.String || u.Str == "" {
		what := "missing"
		if !isNull(u) {
			what = JSONType(u)
		}
		return part{}, badRequest(param, param+` must be an image URL: "https://…" or "data:<media type>;base64,<data>" (`+what+")")
	}
	s := u.Str
	scheme, _, _ := strings.Cut(s, ":")
	switch strings.ToLower(scheme) {
	case "data":
		mt, data, ok := parseDataURL(s)
		if !ok || data == "" {
			return part{}, badRequest(param, param+` is a data: URL but not "data:<media type>;base64,<data>" with a media type and data`)
		}
		return part{typ: partImage, mediaType: mt, data: data}, nil
	case "http", "https":
		return part{typ: partImage, url: s}, nil
	}
	return part{}, badRequest(param, param+` must be an http(s) URL or "data:<media type>;base64,<data>"`)
}

// appendMessage adds p to the last message when it has role r, else starts one.
func appendPart(msgs []message, r role, p part) []message {
	if n := len(msgs); n > 0 && msgs[n-1].role == r {
		msgs[n-1].parts = append(msgs[n-1].parts, p)
		return msgs
	}
	return append(msgs, message{role: r, parts: []part{p}})
}

// joinText joins the text parts of ps with sep.
func joinText(ps []part, sep string) string {
	if len(ps) == 1 && ps[0].typ == partText {
		return ps[0].text
	}
	var sb strings.Builder
	n := 0
	for i := range ps {
		if ps[i].typ != partText {
			continue
		}
		if n > 0 {
			sb.WriteString(sep)
		}
		sb.WriteString(ps[i].text)
		n++
	}
	return sb.String()
}

// onlyText reports whether every part is text.
func onlyText(ps []part) bool {
	for i := range ps {
		if ps[i].typ != partText {
			return false
		}
	}
	return true
}

// stringContent reads the start that every content value shares: a string is
// one text part (done); anything else but an array is a 400 on p saying it
// must be a string or an array of what (done); an array is left to the
// caller (done false).
func stringContent(c gjson.Result, p, what string) (ps []part, done bool, err error) {
	if c.Type == gjson.String {
		return []part{{typ: partText, text: c.Str}}, true, nil
	}
	if !c.IsArray() {
		return nil, true, badRequest(p, p+" must be a string or an array of "+what)
	}
	return nil, false, nil
}

// decodeSharedField reads a top-level request field that no protocol's own
// switch took: model, stream, temperature and top_p, which Chat, Responses
// and Messages name and type alike; nil for a field in ignored or a null
// one; else a 400 on name saying the proto field cannot be translated.
func decodeSharedField(rq *request, name string, v gjson.Result, ignored map[string]bool, proto string) error {
	var err error
	switch name {
	case "model":
		rq.model, err = wantString(v, name)
	case "stream":
		var b *bool
		b, err = wantBool(v, name)
		rq.stream = b != nil && *b
	case "temperature":
		rq.temperature, err = wantFloat(v, name)
	case "top_p":
		rq.topP, err = wantFloat(v, name)
	default:
		if ignored[name] || isNull(v) {
			return nil
		}
		err = badRequest(name, "the "+proto+" field "+name+" cannot be translated")
	}
	return err
}
