package mock

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The real clients against the fleet itself (no gateway in between): the
// tool script must be something Codex CLI and Claude Code act on. The
// binaries are $TROUPE_CODEX_BIN / $TROUPE_CLAUDE_BIN (make test passes the
// pinned ones `make clients` installs; a path given must exist), else the
// copies under .cache/npm; without either the tests skip.

// clientBin finds a real client binary: $env, else .cache/npm/node_modules/.bin/name.
func clientBin(t *testing.T, env, name string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		if p, err := filepath.Abs(filepath.Join("..", "..", ".cache", "npm", "node_modules", ".bin", name)); err == nil {
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
	t.Skipf("no %s: set %s or run make clients", name, env)
	return ""
}

// clientEnv is the environment of a client run: this process's, without
// anything that could point the client elsewhere, plus extra.
func clientEnv(extra ...string) []string {
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

// runClient runs bin with args in a fresh directory and returns its stdout.
func runClient(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

const clientPrompt = "Run 'echo hello-from-mock' in the shell and tell me the output."

func TestCodexCLIToolTurn(t *testing.T) {
	bin := clientBin(t, "TROUPE_CODEX_BIN", "codex")
	acc := Account{Name: "cli-openai", Kind: KindOpenAI, Token: "sk-proj-cli-0001"}
	f, base := startFleet(t, acc)
	home := t.TempDir()
	config := `model = "gpt-5.4"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.mock]
name = "Mock"
base_url = "` + base + `/v1"
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runClient(t, bin, clientEnv("CODEX_HOME="+home, "HOME="+t.TempDir(), "MOCK_API_KEY="+acc.Token),
		"exec", "--skip-git-repo-check", clientPrompt)
	// Codex ran the command and the answer quotes what it printed.
	if !strings.Contains(out, "Hello from cli-openai. The tool returned:") || !strings.Contains(out, "hello-from-mock") {
		t.Errorf("codex output:\n%s", out)
	}
	if st := f.Stats(acc.Name); st.Completed != 2 {
		t.Errorf("stats %+v, want 2 completed answers (the call, then the text)", st)
	}
}

func TestClaudeCodeToolTurn(t *testing.T) {
	bin := clientBin(t, "TROUPE_CLAUDE_BIN", "claude")
	acc := Account{Name: "cli-claude", Kind: KindAnthropic, Token: "sk-ant-cli-0002"}
	f, base := startFleet(t, acc)
	out := runClient(t, bin, clientEnv("CLAUDE_CONFIG_DIR="+t.TempDir(), "HOME="+t.TempDir(),
		"ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY="+acc.Token,
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"),
		"-p", clientPrompt, "--model", "claude-sonnet-4-5", "--allowedTools", "Bash(echo *)", "--output-format", "json")
	var res struct {
		Result   string `json:"result"`
		IsError  bool   `json:"is_error"`
		NumTurns int    `json:"num_turns"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
		t.Fatalf("claude output is not its JSON result: %v\n%s", err, out)
	}
	if res.IsError || res.NumTurns != 2 || !strings.HasPrefix(res.Result, "Hello from cli-claude. The tool returned:") || !strings.Contains(res.Result, "hello-from-mock") ||
		strings.Contains(res.Result, "system-reminder") {
		t.Errorf("claude result %+v", res)
	}
	if st := f.Stats(acc.Name); st.Completed != 2 {
		t.Errorf("stats %+v, want 2 completed answers (the call, then the text)", st)
	}
}
