package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDuplicateRoutingKeysRefused(t *testing.T) {
	s, sys, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	for _, body := range []string{
		`{"model":"m","model":"other"}`,
		`{"model":"m","stream":false,"stream":true}`,
	} {
		resp := do(s, "POST", "/v1/chat/completions", key, []byte(body))
		if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) {
			t.Errorf("%s: %d %s", body, resp.StatusCode(), resp.Body())
		}
	}
	// Nested keys of the same name are not duplicates.
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","metadata":{"model":"x"},"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Errorf("nested model key refused: %d %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

func TestKeyCacheIsBounded(t *testing.T) {
	s, _, _ := testServer(t, 1, cannedTransport{})
	for i := range maxCachedKeys + 10 {
		s.keys.put(fmt.Sprint(i), &cachedKey{})
	}
	if n := s.keys.size.Load(); n > maxCachedKeys {
		t.Fatalf("cache holds %d entries, bound %d", n, maxCachedKeys)
	}
}

// A request without a valid key cannot make the server buffer a large body:
// it is cut at 64 KiB and answered 401.
func TestUnauthenticatedBodyLimit(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	ln := serveTCP(t, s)
	big := append([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"x":"`), bytes.Repeat([]byte("a"), 1<<20)...)
	big = append(big, `"}`...)
	// A raw connection: the server answers and closes once the limit is hit,
	// while this client is still writing, so read the answer concurrently.
	post := func(auth string) (int, []byte) {
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(big))
		if auth != "" {
			head += "Authorization: Bearer " + auth + "\r\n"
		}
		go func() {
			conn.Write([]byte(head + "\r\n"))
			conn.Write(big)
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := post(""); st != 401 || !isOpenAIError(b) {
		t.Fatalf("no key: %d %s", st, b)
	}
	if st, b := post("sk-troupe-madeup"); st != 401 || !isOpenAIError(b) {
		t.Fatalf("bad key: %d %s", st, b)
	}
	if st, b := post(key); st != 200 {
		t.Fatalf("valid key, 1 MiB body: %d %s", st, b)
	}
}

// A chunked body over the limit is a 413 even though fasthttp resets the
// request before the error handler sees it (the answer was 401 "You didn't
// provide an API key" to a client that sent a valid one).
func TestChunkedBodyTooLarge(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	ln := serveTCP(t, s)
	// The answer is in the client's protocol, although fasthttp has reset
	// the path by the time it is written.
	for _, c := range []struct{ path, auth, shape string }{
		{"/v1/messages", "x-api-key: " + key, `{"type":"error","error":{"type":"request_too_large"`},
		{"/v1/chat/completions", "Authorization: Bearer " + key, `{"error":{"message":`},
	} {
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\nTransfer-Encoding: chunked\r\n\r\n", c.path, c.auth)
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range s.cfg.MaxBodySize>>20 + 2 {
				if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return // the server answered and closed
				}
			}
			conn.Write([]byte("0\r\n\r\n"))
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != 413 || !bytes.Contains(b, []byte("request_too_large")) || !bytes.HasPrefix(b, []byte(c.shape)) {
			t.Errorf("%s chunked, too large: %d %s, want 413 starting %s", c.path, resp.StatusCode, b, c.shape)
		}
	}
}

// A request head too large to read is refused with 431, not a 400 "could
// not be parsed".
func TestHeaderTooLarge(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	ln := serveTCP(t, s)
	conn := dialTCP(t, ln)
	go fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Junk: %s\r\nContent-Length: 2\r\n\r\n{}",
		key, strings.Repeat("j", 70<<10))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 431 || !bytes.Contains(b, []byte("request_header_fields_too_large")) {
		t.Fatalf("70 KiB header: %d %s, want 431", resp.StatusCode, b)
	}
}

// A head too large to parse is refused in the client's protocol, known
// from the start of its request line (it was OpenAI's shape for every
// path), and every such answer names its request: X-Request-Id, and
// request_id in Anthropic's shape, as for 413 (issue 16, finding 10).
func TestTransportErrorsInClientShape(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	ln := serveTCP(t, s)
	send := func(head string, body []byte) (*http.Response, []byte) {
		t.Helper()
		conn := dialTCP(t, ln)
		go func() {
			conn.Write([]byte(head))
			conn.Write(body)
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	junk := strings.Repeat("j", 70<<10)
	for _, tc := range []struct {
		name, head string
		body       []byte
		status     int
		anthropic  bool
	}{
		{"431 messages", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + key + "\r\nX-Junk: " + junk + "\r\n\r\n", nil, 431, true},
		{"431 count_tokens", "POST /v1/messages/count_tokens?beta=true HTTP/1.1\r\nHost: x\r\nX-Junk: " + junk + "\r\n\r\n", nil, 431, true},
		{"431 chat", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Junk: " + junk + "\r\n\r\n", nil, 431, false},
		// A body fasthttp cannot read (a chunk size that is no number): 400
		// in the client's shape, read from the request line, since fasthttp
		// has reset the request by then. /v1/messages got OpenAI's.
		{"400 messages, bad chunk", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + key + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", nil, 400, true},
		{"400 chat, bad chunk", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", nil, 400, false},
		// Declared over the limit: refused on the head, the body never sent.
		{"413 messages", fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, 17<<20),
			nil, 413, true},
	} {
		resp, b := send(tc.head, tc.body)
		id := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != tc.status || id == "" {
			t.Errorf("%s: %d, X-Request-Id %q, want %d with an id: %s", tc.name, resp.StatusCode, id, tc.status, b)
			continue
		}
		if !tc.anthropic {
			if !isOpenAIError(b) {
				t.Errorf("%s: %s, want OpenAI's shape", tc.name, b)
			}
			continue
		}
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.RequestID != id {
			t.Errorf("%s: %s, want Anthropic's shape with request_id %q", tc.name, b, id)
		}
	}
}
