package mock

import (
	"bytes"
	"encoding/json"
	"github.com/troupe-gw/troupe/internal/poll"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// startFleet starts a fleet with accs on a loopback port and closes it at
// the end of the test. It returns the fleet and the base URL.
func startFleet(t testing.TB, accs ...Account) (*Fleet, string) {
	t.Helper()
	f := New(Config{Accounts: accs})
	addr, err := f.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Start returned %q, want 127.0.0.1:PORT", addr)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f, "http://" + addr
}

// newClient returns an HTTP client whose connections are closed at the end
// of the test.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// do sends a request and returns the response (body read and closed).
func do(t testing.TB, c *http.Client, method, url, token, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, b
}

// sseEvent is one parsed SSE event.
type sseEvent struct {
	event string // the event: line, "" if none
	data  string // the data: line
}

// parseSSE splits an SSE body into events. It requires every event to end
// with a blank line and every line to be an event:, data: or comment line.
func parseSSE(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("SSE body does not end with a blank line: %q", tail(body))
	}
	var evs []sseEvent
	for _, block := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		var ev sseEvent
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if ev.data != "" {
					t.Fatalf("two data lines in one event: %q", block)
				}
				ev.data = strings.TrimPrefix(line, "data: ")
			case strings.HasPrefix(line, ":"):
			default:
				t.Fatalf("unexpected SSE line %q in %q", line, block)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// obj parses s as a JSON object, failing the test if it is not one.
func obj(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("invalid JSON %q: %v", s, err)
	}
	if dec.More() {
		t.Fatalf("trailing data after JSON object %q", s)
	}
	return m
}

func get(m map[string]any, path ...any) any {
	var v any = m
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = mm[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func num(t testing.TB, v any) int64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%v is not an integer", v)
	}
	return i
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// sameShape checks that got has the keys of want, recursively (objects, and
// the first element of arrays when both are non-empty); with exact, the key
// sets must be equal. JSON kinds must match unless either side is null.
func sameShape(t testing.TB, path string, want, got any, exact bool) {
	t.Helper()
	if want == nil || got == nil {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: got %T, want an object", path, got)
			return
		}
		for _, k := range keys(w) {
			gv, ok := g[k]
			if !ok {
				t.Errorf("%s: missing key %q (have %v)", path, k, keys(g))
				continue
			}
			sameShape(t, path+"."+k, w[k], gv, exact)
		}
		if exact {
			for _, k := range keys(g) {
				if _, ok := w[k]; !ok {
					t.Errorf("%s: extra key %q (fixture has %v)", path, k, keys(w))
				}
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			t.Errorf("%s: got %T, want an array", path, got)
			return
		}
		if len(w) > 0 && len(g) > 0 {
			sameShape(t, path+"[0]", w[0], g[0], exact)
		}
	default:
		if kind(want) != kind(got) {
			t.Errorf("%s: got %v (%T), want a value like %v (%T)", path, got, got, want, want)
		}
	}
}

func kind(v any) string {
	switch v.(type) {
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "other"
}

// waitFor polls cond until it holds, failing t after 30 s (a bound for a
// machine loaded by other test packages, not a measure).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, what, cond)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readAll(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
