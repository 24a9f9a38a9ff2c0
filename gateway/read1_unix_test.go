//go:build unix

package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, the server's
// wrapped as the front wraps it (with its socket for read1).
func tcpPair(t *testing.T) (client net.Conn, server *guardedConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client = dialTCP(t, ln)
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	raw, err := sc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return client, &guardedConn{Conn: sc, raw: raw}
}

// TestRead1 checks a one-byte read of a TCP connection (read1): the byte,
// then the rest of what the socket held from the next reads, whatever
// their size; a deadline's timeout; the byte after it; EOF.
func TestRead1(t *testing.T) {
	client, gc := tcpPair(t)
	if _, err := client.Write([]byte("hello, world")); err != nil {
		t.Fatal(err)
	}
	var b1 [1]byte
	if n, err := gc.Read(b1[:]); n != 1 || err != nil || b1[0] != 'h' {
		t.Fatalf("first Read = %d %q %v, want 1 'h' nil", n, b1[:n], err)
	}
	small := make([]byte, 4)
	if n, err := gc.Read(small); n != 4 || err != nil || string(small) != "ello" {
		t.Fatalf("second Read = %d %q %v, want the stash's next 4 bytes", n, small[:n], err)
	}
	rest := make([]byte, 64)
	if n, err := gc.Read(rest); err != nil || string(rest[:n]) != ", world" || gc.stash != nil {
		t.Fatalf("third Read = %q %v (stash held: %v), want the stash's rest and the stash back", rest[:n], err, gc.stash != nil)
	}

	gc.SetReadDeadline(time.Now().Add(-time.Second))
	n, err := gc.Read(b1[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline = %d %v, want 0 and a timeout", n, err)
	}
	gc.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := gc.Read(b1[:]); n != 1 || err != nil || b1[0] != 'x' || gc.stash != nil {
		t.Fatalf("Read of a lone byte = %d %q %v (stash held: %v), want 1 'x' and no stash", n, b1[:n], err, gc.stash != nil)
	}
	client.Close()
	if n, err := gc.Read(b1[:]); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d %v, want 0 io.EOF", n, err)
	}
}

// TestKeepAliveRequestsRead1 sends requests on one keep-alive connection
// through the front (whose fasthttp server reads each request's first byte
// alone, read1): one after the other, one whose body is larger than a
// stash, two written at once (pipelined), and one whose first byte comes
// in a write of its own. Every one is answered, in order.
func TestKeepAliveRequestsRead1(t *testing.T) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	s, _, key := testServer(t, 4, cannedTransport{200, "application/json", answer})
	conn := dialTCP(t, serveTCP(t, s))
	br := bufio.NewReader(conn)
	request := func(content string) string {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, content)
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + key +
			"\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
	}
	expect := func(what string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "hello there") {
			t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
		}
	}
	write := func(s string) {
		t.Helper()
		if _, err := conn.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		write(request("hi"))
		expect(fmt.Sprintf("request %d", i))
	}
	write(request(strings.Repeat("a", 3*stashSize)))
	expect("a body larger than a stash")
	write(request("one") + request("two"))
	expect("pipelined, first")
	expect("pipelined, second")
	r := request("split")
	write(r[:1])
	write(r[1:])
	expect("first byte apart")
}
