package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
)

// A client that resets its connection right after sending a stream request
// went away; it says nothing about the account, which must not be penalized
// (a handful of such clients once cooled a whole pool down).
func TestClientResetDoesNotPenalizeAccounts(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(2, 4, 2), nil))
	addr := strings.TrimPrefix(strings.TrimSuffix(d.base, "/v1"), "http://")
	body := `{"model":"gpt-4.1-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", d.apiKey, len(body), body)
	for range 20 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(req))
		conn.(*net.TCPConn).SetLinger(0) // close with RST
		conn.Close()
	}
	// Every request ended (each released its lease, if it took one), then
	// every release was filed: an account publishes its view with the
	// release's outcome in the same turn as the lease count it frees.
	eventually(t, 30*time.Second, "every request ended", func() (bool, string) {
		n := inflightRequests(t, d.app)
		return n == 0, fmt.Sprintf("%v requests in flight", n)
	})
	eventually(t, 10*time.Second, "every lease returned", func() (bool, string) {
		n := 0
		for _, v := range d.app.sys.Views() {
			n += v.InFlight
		}
		return n == 0, fmt.Sprintf("%d in flight", n)
	})
	for _, v := range d.app.sys.Views() {
		if v.Status != actors.StatusActive || v.Failures != 0 {
			t.Errorf("%s: status %s, %d failures after client resets", v.Name, v.Status, v.Failures)
		}
	}
	resp, b := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("after resets: %d %s", resp.StatusCode, b)
	}
}
