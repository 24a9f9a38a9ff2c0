package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestAnnounceRedisDown: a CLI command that tells running gateways of a
// change while Redis is down prints one warning line saying so, not
// go-redis's own pool log line ("redis: … pool.go:… failed to dial") on
// top of it. go-redis writes that line to the process's stderr through its
// package logger, so the command runs in a child process (this test binary
// again) whose whole stderr is read.
func TestAnnounceRedisDown(t *testing.T) {
	if addr := os.Getenv("TROUPE_TEST_ANNOUNCE_ADDR"); addr != "" {
		cmd := &cobra.Command{}
		cmd.SetContext(t.Context())
		cmd.SetErr(os.Stderr)
		cfg := &Config{}
		cfg.Cache.Driver, cfg.Cache.URL = "redis", "redis://"+addr+"/0"
		announceKeys(cmd, cfg, "revoked k")
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	child := exec.Command(os.Args[0], "-test.run=^TestAnnounceRedisDown$")
	child.Env = append(os.Environ(), "TROUPE_TEST_ANNOUNCE_ADDR="+addr)
	var stderr bytes.Buffer
	child.Stderr = &stderr
	if err := child.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "# warning: ") || !strings.Contains(lines[0], "Redis at "+addr+" is unreachable") {
		t.Fatalf("stderr of a notification with Redis down:\n%s\nwant one line: # warning: … Redis at %s is unreachable …", stderr.String(), addr)
	}
}
