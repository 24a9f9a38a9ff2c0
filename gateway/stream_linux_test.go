//go:build linux

package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/troupe-gw/troupe/internal/cputime"
)

// BenchmarkChatStreamTCP is one streamed Chat request per op from a client
// on loopback through the gateway's server to an in-memory upstream (the
// canned stream of 14 events, all in one read): what the stream's writes
// to a real socket cost. cpu-ns/op is the process's user+system CPU per op
// (client included; cpuNanos is serve_bench_test.go's); syscw/op its
// write syscalls per op (/proc/self/io, Linux; the client's one write
// included).
//
//	go test -run '^$' -bench ChatStreamTCP -benchmem ./gateway/
func BenchmarkChatStreamTCP(b *testing.B) {
	s, _, key := testServer(b, 4, sse(readBench(b, "testdata/chat-stream-text.sse")))
	ln := serveTCP(b, s)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req := []byte(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body))
	br := bufio.NewReaderSize(conn, 64<<10)
	end := []byte("\r\n0\r\n\r\n")
	var got []byte
	b.ReportAllocs()
	cpu0, w0 := int64(cputime.Process()), writeSyscalls()
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		got = got[:0]
		for !bytes.HasSuffix(got, end) {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			got = append(got, line...)
		}
	}
	b.ReportMetric(float64(int64(cputime.Process())-cpu0)/float64(b.N), "cpu-ns/op")
	if w := writeSyscalls(); w >= 0 && w0 >= 0 {
		b.ReportMetric(float64(w-w0)/float64(b.N), "syscw/op")
	}
}

// writeSyscalls is the process's count of write syscalls so far
// (/proc/self/io's syscw), -1 when it cannot be read.
func writeSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("syscw: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
