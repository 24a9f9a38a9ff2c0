package cachetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlackTimeout is the Redis client timeout (dial, read, write, pool) for
// tests that check what a cache does rather than how fast it gives up: the
// shared test Redis serves every suite of a loaded machine, where the
// default 200 ms is sometimes exceeded and reads as an outage.
const SlackTimeout = 2 * time.Second

// DefaultRedisURL is the Redis the tests use when TROUPE_TEST_REDIS_URL is unset.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// RequireServices reports whether TROUPE_REQUIRE_SERVICES=1: tests that
// need a service (Redis, redis-server) fail instead of skipping without it.
func RequireServices() bool { return os.Getenv("TROUPE_REQUIRE_SERVICES") == "1" }

// skipOrFail skips t, or fails it when services are required.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if RequireServices() {
		t.Fatalf(format+" (TROUPE_REQUIRE_SERVICES=1)", args...)
	}
	t.Skipf(format, args...)
}

// RedisURL returns TROUPE_TEST_REDIS_URL (default DefaultRedisURL) after
// checking with a PING that the Redis answers. When it does not, t is
// skipped, or fails when TROUPE_REQUIRE_SERVICES=1.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TROUPE_TEST_REDIS_URL")
	if u == "" {
		u = DefaultRedisURL
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("TROUPE_TEST_REDIS_URL=%q: %v", u, err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.MaxRetries = time.Second, time.Second, -1
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		skipOrFail(t, "Redis at %s unreachable: %v", opt.Addr, err)
	}
	return u
}

// SlackURL returns url with SlackTimeout as its client's dial, read, write
// and pool timeouts (cache.url's query parameters, docs/configuration.md),
// for a gateway process a test starts on the shared Redis: at the default
// 200 ms a loaded machine's slow reply reads as an outage, and the gateway
// falls back to its local cache, which other instances do not share.
// Parameters url already sets are kept.
func SlackURL(url string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, k := range []string{"dial_timeout", "read_timeout", "write_timeout", "pool_timeout"} {
		if !strings.Contains(url, k+"=") {
			url += sep + k + "=" + SlackTimeout.String()
			sep = "&"
		}
	}
	return url
}

// RedisPrefix returns a key prefix of its own for t ("troupe-test:<random>:")
// and, when t ends, deletes every key under it from the Redis at url, so that
// tests can share one Redis with each other and with a deployment.
func RedisPrefix(t testing.TB, url string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "troupe-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return
		}
		c := redis.NewClient(opt)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return prefix
}

// RedisServer is a private redis-server process on 127.0.0.1 for tests that
// stop and restart Redis. It keeps no data on disk, so a restart empties it.
// Start must be called from the test's goroutine; Kill may be called from any.
type RedisServer struct {
	t    testing.TB
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 and kills it
// when t ends. Without redis-server on PATH, t is skipped, or fails when
// TROUPE_REQUIRE_SERVICES=1.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOrFail(t, "redis-server not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &RedisServer{t: t, port: port}
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the server's redis:// URL (database 0).
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Start starts the server on its port (again, after Kill) and waits until it
// answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("redis-server already running")
	}
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s not answering after 10s: %v\n%s", s.Addr(), err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server (SIGKILL, as a crash would) and waits for it to
// exit. It does nothing when the server is not running.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Client returns a go-redis client of the server, closed when the test ends.
func (s *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { c.Close() })
	return c
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) < 1<<16 {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
