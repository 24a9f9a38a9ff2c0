package main

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/clienttest"
	"github.com/troupe-gw/troupe/storage"
)

// runCodex runs `codex exec prompt` with model against the demo (a custom
// model provider whose base URL is the gateway) and returns its stdout.
func runCodex(t *testing.T, bin string, d *testDemo, model, prompt string) string {
	t.Helper()
	home := codexHome(t, d, model, false)
	stdout, _ := clienttest.Run(t, "codex exec -m "+model, 120*time.Second, bin, codexEnv(t, d, home),
		"exec", "--skip-git-repo-check", prompt)
	return stdout
}

// TestCodexCLITranslated runs the real Codex CLI (codex exec, Responses)
// through the gateway on translated paths: anthropic accounts (Messages)
// and openai_compat accounts (Chat). Each completes a plain prompt and a
// tool turn — the mock calls exec_command with the echo, Codex runs it and
// sends its output back, and the final answer quotes it.
func TestCodexCLITranslated(t *testing.T) {
	bin := codexBin(t)
	d := startTestDemo(t, nil, demoPool(8))
	for _, pm := range providerModels {
		if pm.provider != storage.ProviderAnthropic && pm.provider != storage.ProviderOpenAICompat {
			continue
		}
		t.Run(string(pm.provider), func(t *testing.T) {
			out := runCodex(t, bin, d, pm.model, "Say hi in one short sentence.")
			if m := answerFrom.FindStringSubmatch(strings.TrimSpace(lastLine(out))); m == nil {
				t.Fatalf("codex stdout lacks the mock answer:\n%s", out)
			}
			d.servedBy(t, "codex exec", strings.TrimSpace(lastLine(out)), pm.provider)

			word := "codex-tool-" + string(pm.provider)
			out = runCodex(t, bin, d, pm.model, "Run 'echo "+word+"' in the shell and tell me the output.")
			last := strings.TrimSpace(lastLine(out))
			t.Logf("tool turn answer: %s", last)
			d.servedBy(t, "codex exec tool turn", last, pm.provider)
			// Codex's exec_command output ends "Process exited with code 0 … Output: <stdout>".
			if !strings.Contains(last, "The tool returned:") || !strings.Contains(last, "Output: "+word) {
				t.Errorf("tool turn: the answer does not quote the command's output %q:\n%s", word, out)
			}
		})
	}
	d.assertNoLeases(t)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			return lines[i]
		}
	}
	return ""
}
