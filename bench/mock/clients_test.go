package mock

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/clienttest"
)

// The real clients against the fleet itself (no gateway in between): the
// tool script must be something Codex CLI and Claude Code act on. The
// binaries are $TROUPE_CODEX_BIN / $TROUPE_CLAUDE_BIN (make test passes the
// pinned ones `make clients` installs; a path given must exist), else the
// copies under .cache/npm; without either the tests skip.

// runClient runs bin with args in a fresh directory and returns its stdout.
func runClient(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	stdout, _ := clienttest.Run(t, filepath.Base(bin), 120*time.Second, bin, env, args...)
	return stdout
}

const clientPrompt = "Run 'echo hello-from-mock' in the shell and tell me the output."

func TestCodexCLIToolTurn(t *testing.T) {
	bin := clienttest.Bin(t, "TROUPE_CODEX_BIN", "codex", "codex", false)
	acc := Account{Name: "cli-openai", Kind: KindOpenAI, Token: "sk-proj-cli-0001"}
	f, base := startFleet(t, acc)
	home := clienttest.CodexHome(t, clienttest.CodexConfig{Model: "gpt-5.4", Provider: "mock", Name: "Mock",
		BaseURL: base + "/v1", EnvKey: "MOCK_API_KEY"})
	out := runClient(t, bin, clienttest.Env("CODEX_HOME="+home, "HOME="+t.TempDir(), "MOCK_API_KEY="+acc.Token),
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
	bin := clienttest.Bin(t, "TROUPE_CLAUDE_BIN", "claude", "claude", false)
	acc := Account{Name: "cli-claude", Kind: KindAnthropic, Token: "sk-ant-cli-0002"}
	f, base := startFleet(t, acc)
	out := runClient(t, bin, clienttest.Env("CLAUDE_CONFIG_DIR="+t.TempDir(), "HOME="+t.TempDir(),
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
