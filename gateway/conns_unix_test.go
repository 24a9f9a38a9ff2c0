//go:build unix

package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFDExhaustion runs a gateway in a child process with 128 file
// descriptors and no connection caps, opens 300 idle connections to it,
// and checks that it still serves once they are gone: the accept loop hit
// EMFILE, backed off and went on. Before, the child's Serve ended.
func TestFDExhaustion(t *testing.T) {
	if os.Getenv("TROUPE_FD_CHILD") == "1" {
		fdChild(t)
		return
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFDExhaustion$", "-test.v")
	cmd.Env = append(os.Environ(), "TROUPE_FD_CHILD=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // closing it stops the child
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill() })
	var addr string
	for addr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child ended before listening: %s", stderr.String())
			}
			if a, ok := strings.CutPrefix(l, "LISTEN "); ok {
				addr = a
			}
		case <-time.After(60 * time.Second):
			t.Fatal("child did not start")
		}
	}
	go func() { // keep reading: the child's "SERVE ENDED" line must not block it
		for l := range lines {
			if strings.HasPrefix(l, "SERVE ENDED") {
				t.Log("child:", l)
			}
		}
	}()
	var idle []net.Conn
	for range 300 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			break // the backlog is full: enough
		}
		idle = append(idle, c)
	}
	t.Logf("opened %d idle connections against 128 descriptors", len(idle))
	for _, c := range idle {
		c.Close()
	}
	// Every slot is free again once the child has seen the closes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("child exited: %v\n%s", err, stderr.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			code, gerr := get(c, bufio.NewReader(c))
			c.Close()
			if gerr == nil && code == 200 {
				break
			}
			err = gerr
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway no longer serves after fd exhaustion: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	var n float64
	for l := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(l, "troupe_accept_errors_total "); ok {
			fmt.Sscan(v, &n)
		}
	}
	if n == 0 {
		t.Errorf("troupe_accept_errors_total is 0: the child never ran out of descriptors")
	}
	t.Logf("accept errors retried: %v", n)
}

// fdChild is TestFDExhaustion's gateway: 128 descriptors, no caps, a 1 s
// header timeout (so idle connections free their descriptors).
func fdChild(t *testing.T) {
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 128, Max: 128}); err != nil {
		t.Fatal(err)
	}
	base, sys, _ := testServer(t, 1, cannedTransport{status: 200, ctype: "application/json", body: []byte(`{}`)})
	s := New(Config{MaxConns: -1, MaxConnsPerIP: -1, HeaderTimeout: time.Second}, sys, base.store, nil, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("LISTEN " + ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	select {
	case err := <-served:
		fmt.Printf("SERVE ENDED: %v\n", err)
		os.Exit(3)
	case <-stop:
		s.srv.Shutdown()
	}
}
