//go:build linux

package sock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection, each wrapped.
func pair(t *testing.T) (client, server *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	d := &net.Dialer{}
	c, err := Dial(d)(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	client, ok := c.(*Conn)
	if !ok {
		t.Fatalf("Dial gave %T, want *Conn", c)
	}
	server, ok = Wrap(s).(*Conn)
	if !ok {
		t.Fatalf("Wrap gave %T, want *Conn", s)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestWrapOnlyTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(pipe) = %T, want the pipe unchanged", got)
	}
}

// TestRoundTripLarge writes more than the socket buffers hold while the
// reader is not reading, so Write meets EAGAIN, waits and goes on; every
// byte arrives in order.
func TestRoundTripLarge(t *testing.T) {
	c, s := pair(t)
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		n, err := c.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		c.CloseWrite()
		wrote <- err
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
}

func TestEOF(t *testing.T) {
	c, s := pair(t)
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	buf := make([]byte, 8)
	n, err := io.ReadFull(s, buf[:2])
	if err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("ReadFull = %q, %v", buf[:n], err)
	}
	if n, err := s.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's close = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := s.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

func TestReadDeadline(t *testing.T) {
	_, s := pair(t)
	s.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := s.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v; want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("error %v: want a *net.OpError with Op read", err)
	}
}

// TestWriteDeadline fills the peer's buffers: Write waits for room until
// its deadline and reports what it wrote.
func TestWriteDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Write(make([]byte, 64<<20))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write to a peer that never reads = %d, %v; want a timeout", n, err)
	}
	if n <= 0 || n >= 64<<20 {
		t.Fatalf("Write wrote %d bytes before its deadline; want some, not all", n)
	}
}

func TestClosed(t *testing.T) {
	c, _ := pair(t)
	c.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v; want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v; want net.ErrClosed", err)
	}
}

// TestCloseWakesRead: a Read waiting for bytes returns net.ErrClosed when
// another goroutine closes the connection.
func TestCloseWakesRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		done <- err
	}()
	// The read may start before or after the close; either way it ends in net.ErrClosed.
	c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read across Close = %v; want net.ErrClosed", err)
	}
}

func TestReset(t *testing.T) {
	c, s := pair(t)
	s.SetLinger(0)
	s.Close() // RST
	buf := make([]byte, 8)
	var err error
	for err == nil {
		_, err = c.Read(buf)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the peer's reset = %v; want ECONNRESET", err)
	}
	var se *os.SyscallError
	if !errors.As(err, &se) || se.Syscall != "read" {
		t.Fatalf("error %v: want an *os.SyscallError of read", err)
	}
}

// TestConcurrentWrites: writes from several goroutines at once each arrive
// whole (net.Conn's contract), under -race.
func TestConcurrentWrites(t *testing.T) {
	c, s := pair(t)
	const writers, each, size = 8, 200, 1024
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rec := make([]byte, size)
			for i := range each {
				binary.BigEndian.PutUint32(rec, uint32(w))
				binary.BigEndian.PutUint32(rec[4:], uint32(i))
				for j := 8; j < size; j++ {
					rec[j] = byte(w)
				}
				if _, err := c.Write(rec); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); c.CloseWrite() }()
	next := make([]int, writers)
	rec := make([]byte, size)
	for range writers * each {
		if _, err := io.ReadFull(s, rec); err != nil {
			t.Fatal(err)
		}
		w, i := int(binary.BigEndian.Uint32(rec)), int(binary.BigEndian.Uint32(rec[4:]))
		if w >= writers || i != next[w] {
			t.Fatalf("record of writer %d numbered %d; want %d", w, i, next[w])
		}
		next[w]++
		for j := 8; j < size; j++ {
			if rec[j] != byte(w) {
				t.Fatalf("writer %d's record %d interleaved with another's", w, i)
			}
		}
	}
}

// TestReadWhileWriting: a Read and a Write in flight at once on one
// connection (a WebSocket's reader and writer), under -race.
func TestReadWhileWriting(t *testing.T) {
	c, s := pair(t)
	const n = 1 << 20
	echoed := make(chan error, 1)
	go func() { // s echoes what it reads
		_, err := io.Copy(s, io.LimitReader(s, n))
		echoed <- err
	}()
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		io.ReadFull(c, b)
		got <- b
	}()
	want := bytes.Repeat([]byte("0123456789abcdef"), n/16)
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(<-got, want) {
		t.Fatal("echo differs")
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
}

func TestReadFD(t *testing.T) {
	c, s := pair(t)
	rc, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	var n int
	var errno syscall.Errno
	rc.Control(func(fd uintptr) { n, errno = ReadFD(fd, buf) })
	if errno != syscall.EAGAIN {
		t.Fatalf("ReadFD of an empty socket = %d, %v; want EAGAIN", n, errno)
	}
	c.Write([]byte("abc"))
	rc.Read(func(fd uintptr) bool {
		n, errno = ReadFD(fd, buf)
		return errno != syscall.EAGAIN
	})
	if errno != 0 || string(buf[:n]) != "abc" {
		t.Fatalf("ReadFD = %q, %v", buf[:n], errno)
	}
}
