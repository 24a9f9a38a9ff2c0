// Package clienttest runs the real API clients (Codex CLI, Claude Code) in
// tests, isolated from this machine: it finds the pinned binary, gives the
// client an environment without anything that could point it elsewhere and
// a fresh config home, and runs it with a deadline. It is for tests only.
package clienttest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Bin finds a real client binary: $env (a path given must exist, else the
// test fails), else the copy `make clients` installs under the module root's
// .cache/npm/node_modules/.bin/name. Without either the test is skipped, or
// fails when required (what names the client in the messages, e.g. "Codex
// CLI"). With -short (make test-quick) the test is skipped unless required:
// a real client takes seconds to start.
func Bin(t testing.TB, env, name, what string, required bool) string {
	t.Helper()
	if testing.Short() && !required {
		t.Skipf("-short: %s runs in make test", what)
	}
	bin := os.Getenv(env)
	if bin == "" {
		if root, err := moduleRoot(); err == nil {
			p := filepath.Join(root, ".cache", "npm", "node_modules", ".bin", name)
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s=%s: %v", env, bin, err)
		}
		return bin
	}
	if required {
		t.Fatalf("%s is required (TROUPE_REQUIRE_CLIENTS=1) but neither %s nor .cache/npm has it: run make clients", what, env)
	}
	t.Skipf("no %s: set %s or run make clients", what, env)
	return ""
}

// moduleRoot is the nearest directory at or above the working directory
// (a test's package directory) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", os.ErrNotExist
		}
		dir = up
	}
}

// Env is this process's environment without the variables that could point
// a client elsewhere (OPENAI_*, CODEX_*, ANTHROPIC_*, CLAUDE_*, TROUPE_*,
// HTTP(S)_PROXY, ALL_PROXY, HOME), followed by extra ("NAME=value").
func Env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "OPENAI_"), strings.HasPrefix(name, "CODEX_"), strings.HasPrefix(name, "ANTHROPIC_"),
			strings.HasPrefix(name, "CLAUDE_"), strings.HasPrefix(name, "TROUPE_"),
			strings.EqualFold(name, "HTTP_PROXY"), strings.EqualFold(name, "HTTPS_PROXY"), strings.EqualFold(name, "ALL_PROXY"),
			name == "HOME":
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// CodexConfig is the Codex CLI configuration a test gives: one custom model
// provider speaking Responses (https://developers.openai.com/codex/config-reference).
type CodexConfig struct {
	Model      string // model
	Provider   string // the model_providers key, e.g. "troupe"
	Name       string // the provider's display name
	BaseURL    string // base_url, ending in /v1
	EnvKey     string // env_key: the variable holding the API key
	WebSockets bool   // supports_websockets: use the Responses WebSocket
}

// CodexHome writes c as config.toml in a fresh directory (approvals never,
// read-only sandbox, no retries, no update check, no analytics) and returns
// it, for CODEX_HOME.
func CodexHome(t testing.TB, c CodexConfig) string {
	t.Helper()
	home := t.TempDir()
	config := `model = "` + c.Model + `"
model_provider = "` + c.Provider + `"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.` + c.Provider + `]
name = "` + c.Name + `"
base_url = "` + c.BaseURL + `"
wire_api = "responses"
env_key = "` + c.EnvKey + `"
`
	if c.WebSockets {
		config += "supports_websockets = true\n"
	}
	config += `request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// Run runs bin with args in a fresh directory, with env, stdin /dev/null and
// at most timeout, logs how long it took and returns its stdout and stderr.
// The test fails (what names the run, e.g. "codex exec") when the client
// does not finish in time or exits with an error.
func Run(t testing.TB, what string, timeout time.Duration, bin string, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Stdin = nil // /dev/null
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s took %v", what, time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %v\nstdout:\n%s\nstderr:\n%s", what, timeout, out.String(), errOut.String())
	}
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}
