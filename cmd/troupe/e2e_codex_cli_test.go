package main

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

// codexBin finds the pinned Codex CLI: $TROUPE_CODEX_BIN, else the copy
// `make clients` installs under .cache/npm. It skips the test when there is
// none, unless TROUPE_REQUIRE_CLIENTS=1.
func codexBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("TROUPE_CODEX_BIN")
	if bin == "" {
		if p, err := filepath.Abs(filepath.Join("..", "..", ".cache", "npm", "node_modules", ".bin", "codex")); err == nil {
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("TROUPE_CODEX_BIN=%s: %v", bin, err)
		}
		return bin
	}
	if os.Getenv("TROUPE_REQUIRE_CLIENTS") == "1" {
		t.Fatal("the Codex CLI is required (TROUPE_REQUIRE_CLIENTS=1) but neither TROUPE_CODEX_BIN nor .cache/npm has it: run make clients")
	}
	t.Skip("no Codex CLI: set TROUPE_CODEX_BIN or run make clients")
	return ""
}

// TestCodexCLI runs the real Codex CLI (codex exec) against the gateway in
// front of the mock fleet: it must exit 0 and print the mock's answer.
func TestCodexCLI(t *testing.T) {
	bin := codexBin(t)
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))

	home := t.TempDir()
	config := `model = "gpt-5.5"
model_provider = "troupe"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.troupe]
name = "Troupe"
base_url = "` + d.base + `"
wire_api = "responses"
env_key = "TROUPE_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "exec", "--skip-git-repo-check", "Say hi in one short sentence.")
	cmd.Dir = work
	cmd.Stdin = nil // /dev/null
	cmd.Env = append(cleanEnv(), "CODEX_HOME="+home, "HOME="+t.TempDir(), "TROUPE_API_KEY="+d.apiKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	t.Logf("codex exec took %v", time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("codex exec did not finish within 90s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("codex exec: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "from demo-") {
		t.Fatalf("codex stdout lacks the mock answer (\"from demo-\")\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	var served int64
	for _, n := range d.names {
		served += d.fleet.Stats(n).Completed
	}
	if served == 0 {
		t.Errorf("no mock account completed an answer")
	}
	d.assertNoLeases(t)
}

// cleanEnv is the environment without variables that would point the client
// elsewhere (OpenAI keys and base URLs, proxies, another Codex home).
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "OPENAI_"), strings.HasPrefix(name, "CODEX_"), strings.HasPrefix(name, "TROUPE_"),
			strings.EqualFold(name, "HTTP_PROXY"), strings.EqualFold(name, "HTTPS_PROXY"), strings.EqualFold(name, "ALL_PROXY"),
			name == "HOME":
			continue
		}
		out = append(out, kv)
	}
	return out
}
