//go:build linux

package sock

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/cputime"
)

// BenchmarkPacedEcho is one 256-byte request and its echo over loopback
// every millisecond (the pace of troupe bench's 1k req/s phases, at which a
// process goes idle between requests), both ends as net.Conn gives them
// (net) or wrapped (sock). Per op: cpu-ns/op, the process's user and system
// CPU (the pacing sleep's wake-up included, the same in both); ctxsw/op, its
// context switches, voluntary and not (getrusage): with net each request
// wakes sysmon, which then polls every 20 µs until the process is idle again.
//
//	go test -run '^$' -bench PacedEcho -benchtime 3000x ./internal/sock/
func BenchmarkPacedEcho(b *testing.B) {
	for _, c := range wraps {
		b.Run(c.name, func(b *testing.B) {
			conn := echoConn(b, c.wrap)
			req, resp := make([]byte, 256), make([]byte, 256)
			b.ReportAllocs()
			cpu0, sw0 := int64(cputime.Process()), ctxSwitches()
			for b.Loop() {
				time.Sleep(time.Millisecond)
				exchange(b, conn, req, resp)
			}
			n := float64(b.N)
			b.ReportMetric(float64(int64(cputime.Process())-cpu0)/n, "cpu-ns/op")
			b.ReportMetric(float64(ctxSwitches()-sw0)/n, "ctxsw/op")
		})
	}
}

// BenchmarkEcho is the same exchange back to back (no pacing): the cost of
// the calls themselves when the process never idles.
func BenchmarkEcho(b *testing.B) {
	for _, c := range wraps {
		b.Run(c.name, func(b *testing.B) {
			conn := echoConn(b, c.wrap)
			req, resp := make([]byte, 256), make([]byte, 256)
			b.ReportAllocs()
			for b.Loop() {
				exchange(b, conn, req, resp)
			}
		})
	}
}

// wraps are the two ways the benchmarks run: as net.Conn gives a
// connection (net), and wrapped (sock).
var wraps = []struct {
	name string
	wrap func(net.Conn) net.Conn
}{
	{"net", func(c net.Conn) net.Conn { return c }},
	{"sock", Wrap},
}

// echoConn returns the client end of a loopback connection whose server
// end, wrapped as the client's, echoes every 256 bytes it reads; both are
// closed when b ends.
func echoConn(b *testing.B, wrap func(net.Conn) net.Conn) net.Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		s = wrap(s)
		defer s.Close()
		buf := make([]byte, 256)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	conn := wrap(raw)
	b.Cleanup(func() { conn.Close() })
	return conn
}

// exchange writes req on conn and reads its echo into resp.
func exchange(b *testing.B, conn net.Conn, req, resp []byte) {
	if _, err := conn.Write(req); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(conn, resp); err != nil {
		b.Fatal(err)
	}
}

// ctxSwitches is the process's context switches so far, voluntary and
// not, every thread's (getrusage).
func ctxSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}
