//go:build linux

package upstream

import (
	"net"
	"net/url"
	"testing"

	"github.com/troupe-gw/troupe/internal/sock"
	"github.com/valyala/fasthttp"
)

// TestFastClientSocketRaw: the fasthttp client's upstream connections read
// and write with raw system calls (internal/sock).
func TestFastClientSocketRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	f := &fastClient{hosts: make(map[string]*fasthttp.HostClient)}
	c, err := f.host(&url.URL{Scheme: "http", Host: ln.Addr().String()}).Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*sock.Conn); !ok {
		t.Fatalf("the upstream socket is %T, want *sock.Conn", c)
	}
}
