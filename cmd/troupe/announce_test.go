package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// TestCLIChangesWarnRedisDown: every CLI command that changes what running
// gateways cache prints the same single warning when the cache's Redis is
// down, prices set included (a tester once saw it print none while keys
// create warned): each command is run whole, through the root command and
// a config file naming a Redis where nothing listens, and its stderr must
// hold exactly one "# warning: running gateways were not told" line naming
// that Redis. The change itself is stored (the command succeeds).
func TestCLIChangesWarnRedisDown(t *testing.T) {
	clearTroupeEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	dir := t.TempDir()
	conf := filepath.Join(dir, "troupe.yaml")
	if err := os.WriteFile(conf, []byte("data_dir: "+filepath.Join(dir, "data")+"\ncache:\n  driver: redis\n  url: redis://"+addr+"/0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"prices", "set", "gpt-x", "--input", "1.25", "--output", "10"},
		{"prices", "set", "gpt-x", "--input", "2", "--output", "10"},
		{"keys", "create", "--name", "k1"},
		{"keys", "update", "k1", "--rpm", "5"},
		{"keys", "revoke", "k1"},
		{"accounts", "add", "--name", "oai-1", "--provider", "openai", "--api-key", "sk-test-not-real"},
		{"accounts", "remove", "oai-1"},
	} {
		_, errOut, err := runCLI(t, append(args, "-c", conf)...)
		if err != nil {
			t.Fatalf("troupe %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		n := 0
		for _, line := range strings.Split(errOut, "\n") {
			if strings.HasPrefix(line, "# warning: running gateways were not told of this change: Redis at "+addr+" is unreachable") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("troupe %s with Redis down: %d warnings, want 1; stderr:\n%s", strings.Join(args, " "), n, errOut)
		}
	}
}
