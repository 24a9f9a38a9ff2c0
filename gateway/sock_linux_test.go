//go:build linux

package gateway

import (
	"log/slog"
	"net"
	"testing"

	"github.com/troupe-gw/troupe/internal/sock"
)

// TestFrontSocketRaw: the front's accepted connections read and write with
// raw system calls (internal/sock; docs/benchmarks.md, issue 21, "sysmon").
func TestFrontSocketRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := newConnListener(ln, -1, -1, NewMetrics(nil), slog.New(slog.DiscardHandler))
	defer cl.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := cl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gc, ok := c.(*guardedConn)
	if !ok {
		t.Fatalf("Accept gave %T, want *guardedConn", c)
	}
	if _, ok := gc.Conn.(*sock.Conn); !ok {
		t.Fatalf("the accepted socket is %T, want *sock.Conn", gc.Conn)
	}
	if gc.raw == nil {
		t.Fatal("no raw connection for read1")
	}
}
