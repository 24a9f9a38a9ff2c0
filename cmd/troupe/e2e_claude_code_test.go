package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/internal/clienttest"
	"github.com/troupe-gw/troupe/storage"
)

// claudeBin finds the pinned Claude Code: $TROUPE_CLAUDE_BIN, else the copy
// `make clients` installs under .cache/npm. It skips the test when there is
// none, unless TROUPE_REQUIRE_CLIENTS=1.
func claudeBin(t *testing.T) string {
	t.Helper()
	return clienttest.Bin(t, "TROUPE_CLAUDE_BIN", "claude", "Claude Code", requireClients())
}

// claudeResult is the part of `claude -p --output-format json` the tests read.
type claudeResult struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	IsError  bool   `json:"is_error"`
	Result   string `json:"result"`
	NumTurns int    `json:"num_turns"`
}

// runClaude runs `claude -p prompt --model model --output-format json` with
// extra arguments against the demo, isolated from this machine's own
// configuration (a fresh CLAUDE_CONFIG_DIR and HOME, no nonessential
// traffic), and returns its parsed result.
func runClaude(t *testing.T, bin string, d *testDemo, model, prompt string, extra ...string) claudeResult {
	t.Helper()
	args := append([]string{"-p", prompt, "--model", model, "--output-format", "json"}, extra...)
	env := clienttest.Env("HOME="+t.TempDir(), "CLAUDE_CONFIG_DIR="+t.TempDir(),
		"ANTHROPIC_BASE_URL="+strings.TrimSuffix(d.base, "/v1"), "ANTHROPIC_API_KEY="+d.apiKey,
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	)
	stdout, stderr := clienttest.Run(t, "claude -p --model "+model, 120*time.Second, bin, env, args...)
	var r claudeResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &r); err != nil {
		t.Fatalf("claude -p output is not its JSON result: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if r.Type != "result" || r.Subtype != "success" || r.IsError {
		t.Fatalf("claude -p result %+v\nstderr:\n%s", r, stderr)
	}
	return r
}

// TestClaudeCode runs the real Claude Code (claude -p) through the gateway
// against the mock fleet: on the same-protocol path (anthropic accounts,
// bytes passed through) and on translated paths (codex accounts speaking
// Responses, openai_compat accounts speaking Chat). Each path completes a
// plain prompt and a tool turn: the mock answers "Run 'echo …'" with a Bash
// tool call, Claude Code runs it (allowed by --allowedTools) and sends the
// result back, and the mock's final answer quotes it.
func TestClaudeCode(t *testing.T) {
	bin := claudeBin(t)
	const tokens = 12 // demoAccount's OutputTokens
	d := startTestDemo(t, nil, demoPool(8))
	for _, pm := range providerModels {
		if pm.provider == storage.ProviderOpenAI {
			continue // Responses like codex; the SDK tests cover it
		}
		t.Run(string(pm.provider), func(t *testing.T) {
			r := runClaude(t, bin, d, pm.model, "say hi")
			d.checkServed(t, "claude -p", r.Result, tokens, pm.provider)

			word := "claude-tool-" + string(pm.provider)
			r = runClaude(t, bin, d, pm.model, "Run 'echo "+word+"' with Bash and tell me the output.", "--allowedTools", "Bash(echo *)")
			name := d.servedBy(t, "claude -p tool turn", r.Result, pm.provider)
			// Claude Code may append its own <system-reminder> text to the
			// tool result (it does for models it knows); the mock quotes it too.
			if want := mock.ToolResultText(name, word); !strings.HasPrefix(r.Result, want) || r.NumTurns < 2 {
				t.Errorf("tool turn result %q after %d turns, want it to start with %q", r.Result, r.NumTurns, want)
			}
		})
	}
	d.assertNoLeases(t)
}
