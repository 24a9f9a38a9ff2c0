package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// Golden tests: every recorded request, answer, stream and error in
// testdata/ (copies of the shared fixtures, see testdata/README.md) is
// translated into both other protocols and compared with
// testdata/golden/<input>.to-<protocol>.<ext>. Run with -update to rewrite
// the golden files after a deliberate change, then review the diff.

var update = flag.Bool("update", false, "rewrite the golden files")

var protocols = []Protocol{Chat, Responses, Messages}

// protocolOf reads the protocol from a testdata file name prefix.
func protocolOf(t testing.TB, name string) Protocol {
	switch {
	case strings.HasPrefix(name, "chat-"):
		return Chat
	case strings.HasPrefix(name, "responses-"):
		return Responses
	case strings.HasPrefix(name, "messages-"):
		return Messages
	}
	t.Fatalf("%s: no protocol prefix", name)
	return 0
}

// golden compares got with the golden file, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// pretty indents JSON for readable golden files.
func pretty(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, b)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("testdata", dir, "*"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no files in testdata/%s", dir)
	}
	return m
}

func TestGoldenRequests(t *testing.T) {
	for _, f := range files(t, "requests") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				out, err := TranslateRequest(from, to, body, RequestOptions{})
				var got []byte
				if err != nil {
					var te *Error
					if !errors.As(err, &te) || te.Status != 400 {
						t.Fatalf("error %v is not a 400 *Error", err)
					}
					got = []byte("400 " + te.Param + ": " + te.Message + "\n")
				} else {
					if !gjson.ValidBytes(out) {
						t.Fatalf("invalid JSON: %s", out)
					}
					got = pretty(t, out)
				}
				golden(t, strings.TrimSuffix(name, ".json")+".to-"+to.String()+".json", got)
			})
		}
	}
}

func TestGoldenResponses(t *testing.T) {
	for _, f := range files(t, "responses") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				out, err := TranslateResponse(from, to, body, ResponseOptions{Created: 1700000000})
				if err != nil {
					t.Fatal(err)
				}
				golden(t, "response-"+strings.TrimSuffix(name, ".json")+".to-"+to.String()+".json", pretty(t, out))
			})
		}
	}
}

// translateStream runs a whole upstream stream through a Stream.
func translateStream(t testing.TB, from, to Protocol, in []byte, opts StreamOptions) []byte {
	return translateStreamFrom(t, from, to, bytes.NewReader(in), opts)
}

// translateStreamFrom runs a whole upstream stream read from r.
func translateStreamFrom(t testing.TB, from, to Protocol, r io.Reader, opts StreamOptions) []byte {
	out, err := runStream(from, to, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runStream translates the upstream stream read from r, as the gateway
// does: Finish at its end; on a read or Event error, Fail, and the error.
func runStream(from, to Protocol, r io.Reader, opts StreamOptions) ([]byte, error) {
	sc := NewScanner(r, 0)
	st := NewStream(from, to, opts)
	var out []byte
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			return st.Finish(out), nil
		}
		if err != nil {
			return st.Fail(out, "server_error", "", "read failed"), err
		}
		if out, err = st.Event(out, ev); err != nil {
			return st.Fail(out, "server_error", "", "bad event"), err
		}
	}
}

func TestGoldenStreams(t *testing.T) {
	for _, f := range files(t, "streams") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				out := translateStream(t, from, to, in, StreamOptions{IncludeUsage: true, Created: 1700000000})
				checkSSE(t, to, out)
				// Valid by the client protocol's own rules (validate_test.go).
				if _, err := validateStream(to, out, validateOpts{strictArgs: true, usageChunk: true}); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				golden(t, "stream-"+strings.TrimSuffix(name, ".sse")+".to-"+to.String()+".sse", out)
			})
		}
	}
}

// checkSSE asserts that every event of a translated stream is valid JSON
// (or [DONE]) and that the stream ends in its protocol's terminal event.
func checkSSE(t testing.TB, p Protocol, out []byte) {
	sc := NewScanner(bytes.NewReader(out), 0)
	var last string
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(ev.Data) == "[DONE]" {
			last = "[DONE]"
			continue
		}
		if !gjson.ValidBytes(ev.Data) {
			t.Fatalf("event data is not JSON: %s", ev.Data)
		}
		if p != Chat && gjson.GetBytes(ev.Data, "type").Str != string(ev.Name) {
			t.Fatalf("event %s has type %s", ev.Name, gjson.GetBytes(ev.Data, "type").Str)
		}
		last = string(ev.Name)
	}
	switch p {
	case Chat:
		if last != "[DONE]" {
			t.Fatalf("chat stream ends with %q", last)
		}
	case Responses:
		if last != "response.completed" && last != "response.incomplete" && last != "response.failed" {
			t.Fatalf("responses stream ends with %q", last)
		}
	case Messages:
		if last != "message_stop" && last != "error" {
			t.Fatalf("messages stream ends with %q", last)
		}
	}
}

func TestGoldenErrors(t *testing.T) {
	for _, f := range files(t, "errors") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		status := 400
		for _, s := range []string{"401", "404", "429", "500", "529"} {
			if strings.Contains(name, "-"+s) {
				status = int(gjson.Parse(s).Int())
			}
		}
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				golden(t, "error-"+strings.TrimSuffix(name, ".json")+".to-"+to.String()+".json", pretty(t, TranslateError(from, to, status, body)))
			})
		}
	}
}
