//go:build linux

package gateway

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// BenchmarkServePaced is one Chat request every millisecond, the rate of
// troupe bench's 1k req/s phases, from a client on loopback through the
// gateway's server and the account's real transport to a fasthttp
// upstream on loopback: JSON (json) and SSE (stream, the captured 14-event
// stream). At this rate requests do not overlap, so the process goes idle
// between them and every hand-off to a parked goroutine (the connection's
// reader, the scheduler, an account worker, the usage recorder, a timer's
// function) may wake a thread: what a back-to-back loop hides. Per op, the
// process's (client's and upstream's included, the same in any version):
// cpu-ns/op, user and system CPU, the 1 ms sleep's own wake-up included;
// ctxsw/op, context switches, voluntary and not (getrusage); rwsys/op, the
// read and write system calls (/proc/self/io's syscr and syscw).
//
//	go test -run '^$' -bench ServePaced -benchtime 3000x -benchmem ./gateway/
func BenchmarkServePaced(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	for _, c := range []struct {
		name, ctype string
		body        []byte
		req         string
	}{
		{"json", "application/json", answer, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"stream", "text/event-stream", readBench(b, "testdata/chat-stream-text.sse"), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			up := &fasthttp.Server{Handler: func(r *fasthttp.RequestCtx) {
				r.SetContentType(c.ctype)
				r.SetBody(c.body)
			}}
			go up.Serve(ln)
			b.Cleanup(func() { up.Shutdown() })
			tr, err := upstream.New(storage.Account{ID: "up", Name: "up", Provider: storage.ProviderOpenAI, BaseURL: "http://" + ln.Addr().String() + "/v1",
				Credentials: storage.Credentials{APIKey: "sk-bench"}}, upstream.Options{})
			if err != nil {
				b.Fatal(err)
			}
			s, _, key := testServer(b, 4, tr)
			front := serveTCP(b, s)
			send := chatSender(b, front.Addr().String(), key, []byte(c.req))
			send() // both connections open before the counts start
			send()
			b.ReportAllocs()
			cpu0, sw0, rw0 := int64(cputime.Process()), ctxSwitches(), rwSyscalls()
			for b.Loop() {
				time.Sleep(time.Millisecond)
				send()
			}
			n := float64(b.N)
			b.ReportMetric(float64(int64(cputime.Process())-cpu0)/n, "cpu-ns/op")
			b.ReportMetric(float64(ctxSwitches()-sw0)/n, "ctxsw/op")
			if rw := rwSyscalls(); rw >= 0 && rw0 >= 0 {
				b.ReportMetric(float64(rw-rw0)/n, "rwsys/op")
			}
		})
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

// rwSyscalls is the process's read and write system calls so far
// (/proc/self/io's syscr + syscw), -1 when it cannot be read.
func rwSyscalls() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	var n int64
	found := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		for _, p := range [][]byte{[]byte("syscr: "), []byte("syscw: ")} {
			if v, ok := bytes.CutPrefix(line, p); ok {
				k, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil {
					return -1
				}
				n += k
				found++
			}
		}
	}
	if found != 2 {
		return -1
	}
	return n
}
