package translate

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tidwall/gjson"
)

// Fuzz targets for every request translator, the answer translator, the
// error translator and the stream translator. Seeds are the small recorded
// fixtures in testdata/ (the large real-client bodies would slow every
// execution down); the pair of protocols is taken from the first input byte.

// pair decodes a protocol pair (from != to) from a byte.
func pair(k byte) (Protocol, Protocol) {
	i := int(k) % 6
	from := protocols[i/2]
	to := protocols[(i/2+1+i%2)%3]
	return from, to
}

// seedKey is the pair byte for a testdata file name.
func seedKey(name string, to int) byte {
	from := map[byte]int{'c': 0, 'r': 1, 'm': 2}[name[0]]
	return byte(from*2 + to)
}

func FuzzTranslateRequest(f *testing.F) {
	for _, p := range mustGlob(f, "requests") {
		b, _ := os.ReadFile(p)
		if len(b) > 16<<10 {
			continue
		}
		for to := 0; to < 2; to++ {
			f.Add(seedKey(filepath.Base(p), to), b)
		}
	}
	f.Add(byte(0), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`))
	f.Add(byte(4), []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","is_error":true,"content":"no"}]}]}`))
	// Tool-call arguments that are not JSON text in a string, or not an
	// object for Messages (TestToolArgumentsRefused).
	f.Add(byte(1), []byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"x":1}}}]}]}`))
	f.Add(byte(1), []byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":"}}]}]}`))
	f.Add(byte(0), []byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":5}}]}]}`))
	f.Add(byte(2), []byte(`{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f","arguments":{"x":1}}]}`))
	f.Add(byte(3), []byte(`{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"[1]"}]}`))
	f.Add(byte(4), []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"x"}]}]}`))
	// Image parts without a usable source (TestMalformedImagesRefused).
	f.Add(byte(0), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"notanobject"}]}]}`))
	f.Add(byte(0), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64"}}]}]}`))
	f.Add(byte(1), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;base64,"}}]}]}`))
	f.Add(byte(4), []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64"}}]}]}`))
	f.Add(byte(5), []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url"}}]}]}`))
	f.Add(byte(3), []byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_image"}]}]}`))
	f.Fuzz(func(t *testing.T, k byte, body []byte) {
		from, to := pair(k)
		out, err := TranslateRequest(from, to, body, RequestOptions{})
		if err != nil {
			var te *Error
			if !errors.As(err, &te) || te.Status != 400 || te.Message == "" {
				t.Fatalf("%v is not a 400 *Error", err)
			}
			return
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("%s→%s gave invalid JSON %s", from, to, out)
		}
		checkUpstreamRequest(t, to, out)
	})
}

// checkUpstreamRequest fails t when a translated request carries what its
// target would refuse or misread, which the translator must answer with a
// 400 instead: a Messages tool_use whose input is not an object; an image
// without a source (a Messages image with an empty URL, media type or data;
// an OpenAI image URL that is empty or a data: URL without them).
func checkUpstreamRequest(t *testing.T, to Protocol, out []byte) {
	t.Helper()
	badURL := func(u string) bool {
		if mt, data, ok := parseDataURL(u); ok {
			return mt == "" || data == ""
		}
		return u == "" || strings.HasPrefix(u, "data:")
	}
	items := "messages"
	if to == Responses {
		items = "input"
	}
	gjson.GetBytes(out, items).ForEach(func(_, m gjson.Result) bool {
		var walk func(c gjson.Result)
		walk = func(c gjson.Result) {
			c.ForEach(func(_, b gjson.Result) bool {
				switch b.Get("type").Str {
				case "tool_use":
					if to == Messages && !b.Get("input").IsObject() {
						t.Fatalf("tool_use without an object input: %s", out)
					}
				case "tool_result":
					walk(b.Get("content"))
				case "image":
					src := b.Get("source")
					if src.Get("url").Str == "" && (src.Get("media_type").Str == "" || src.Get("data").Str == "") {
						t.Fatalf("image block without a source: %s", out)
					}
				case "image_url":
					if badURL(b.Get("image_url.url").Str) {
						t.Fatalf("image_url part without a URL: %s", out)
					}
				case "input_image":
					if badURL(b.Get("image_url").Str) {
						t.Fatalf("input_image without a URL: %s", out)
					}
				}
				return true
			})
		}
		walk(m.Get("content"))
		walk(m.Get("output"))
		return true
	})
}

func FuzzTranslateResponse(f *testing.F) {
	for _, p := range mustGlob(f, "responses") {
		b, _ := os.ReadFile(p)
		for to := 0; to < 2; to++ {
			f.Add(seedKey(filepath.Base(p), to), b)
		}
	}
	f.Fuzz(func(t *testing.T, k byte, body []byte) {
		from, to := pair(k)
		out, err := TranslateResponse(from, to, body, ResponseOptions{Created: 1})
		if err != nil {
			return
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("%s→%s gave invalid JSON %s", from, to, out)
		}
		_ = TranslateError(from, to, 500, body)
	})
}

func FuzzTranslateError(f *testing.F) {
	for _, p := range mustGlob(f, "errors") {
		b, _ := os.ReadFile(p)
		f.Add(seedKey(filepath.Base(p), 0), 429, b)
	}
	f.Fuzz(func(t *testing.T, k byte, status int, body []byte) {
		from, to := pair(k)
		out := TranslateError(from, to, status, body)
		if !gjson.ValidBytes(out) || !gjson.GetBytes(out, "error").IsObject() {
			t.Fatalf("%s→%s gave %s", from, to, out)
		}
	})
}

func FuzzStream(f *testing.F) {
	for _, p := range mustGlob(f, "streams") {
		b, _ := os.ReadFile(p)
		if len(b) > 16<<10 {
			continue
		}
		for to := 0; to < 2; to++ {
			f.Add(seedKey(filepath.Base(p), to), b)
		}
	}
	f.Fuzz(func(t *testing.T, k byte, in []byte) {
		from, to := pair(k)
		st := NewStream(from, to, StreamOptions{IncludeUsage: k&0x80 != 0, Created: 1})
		sc := NewScanner(iotest.HalfReader(bytes.NewReader(in)), 1<<20)
		var out []byte
		for {
			ev, err := sc.Next()
			if err != nil {
				if err == io.EOF {
					out = st.Finish(out)
				} else {
					out = st.Fail(out, "server_error", "", "read failed")
				}
				break
			}
			n := len(out)
			out, err = st.Event(out, ev)
			if err != nil {
				if len(out) != n {
					t.Fatal("Event appended bytes and failed")
				}
				out = st.Fail(out, "server_error", "", "bad event")
				break
			}
		}
		if !st.Done() {
			t.Fatal("stream not ended after Finish or Fail")
		}
		checkSSE(t, to, out)
		if _, err := validateStream(to, out, validateOpts{loose: true, usageChunk: k&0x80 != 0}); err != nil {
			t.Fatalf("%s→%s: %v\n%s", from, to, err, out)
		}
	})
}

// FuzzStreamConformance draws upstream streams from the generator
// (gen_test.go) with the fuzzer's bytes as its randomness: answers in any
// event order their protocol allows, read in pieces of any size. Each
// translation must be valid by the client protocol's rules and say what
// the upstream said (checkGenerated).
func FuzzStreamConformance(f *testing.F) {
	for i := range 12 {
		f.Add(byte(i), []byte{byte(i * 37), 1, 2, 3, 250, 9, byte(i), 77, 3, 3, 3, 200, 1})
	}
	// Answers cut by the output limit ("length") in their last block, to a
	// Responses client, whose last item must then be "incomplete": Chat
	// (reasoning, text) and Messages (reasoning, text, text).
	f.Add(byte(0), []byte{0x10, 0x6c, 0x88, 0x9a, 0x50, 0xbc, 0x79, 0x8e, 0x99, 0xb0, 0xef, 0x4a, 0xbb, 0x9d, 0x5e, 0x7b, 0xe7, 0x22, 0x39, 0x6e, 0x99, 0x77, 0x2d, 0x46})
	f.Add(byte(5), []byte{0xc6, 0x70, 0xd3, 0xe1, 0x5c, 0xea, 0xb3, 0x0e, 0xf6, 0xa1, 0xce, 0x38, 0xaf, 0x1d, 0xb8, 0x14, 0x21, 0x94, 0xe0, 0x74, 0xbf, 0x6c, 0x8d, 0x17})
	f.Fuzz(func(t *testing.T, k byte, seed []byte) {
		from, to := pair(k)
		if a, out, err := checkGenerated(&byteSource{b: seed}, from, to); err != nil {
			t.Fatalf("%s→%s: %v\n--- upstream\n%s\n--- client\n%s", from, to, err, clip(a.stream), clip(out))
		}
	})
}

func mustGlob(f *testing.F, dir string) []string {
	m, err := filepath.Glob(filepath.Join("testdata", dir, "*"))
	if err != nil || len(m) == 0 {
		f.Fatalf("no seeds in testdata/%s", dir)
	}
	return m
}
