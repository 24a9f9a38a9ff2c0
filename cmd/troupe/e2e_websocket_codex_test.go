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

// TestCodexCLIWebSocket runs the real Codex CLI with a custom provider that
// opts in to the Responses WebSocket (supports_websockets = true): its
// warm-up (generate:false), then the turn continuing it with
// previous_response_id and only the new items, go over the gateway's GET
// /v1/responses upgrade and on to the mock's codex WebSocket mode. It must
// exit 0 with the mock's answer, without falling back to HTTPS.
func TestCodexCLIWebSocket(t *testing.T) {
	bin := codexBin(t)
	d := startTestDemo(t, nil, tuned([]int{1, 5}, nil))

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
supports_websockets = true
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "exec", "--skip-git-repo-check", "Say hi in one short sentence.")
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "CODEX_HOME="+home, "HOME="+t.TempDir(), "TROUPE_API_KEY="+d.apiKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("codex exec did not finish within 90s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("codex exec: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "from demo-") {
		t.Fatalf("codex stdout lacks the mock answer (\"from demo-\")\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "Falling back from WebSockets") {
		t.Fatalf("codex fell back to HTTPS\nstderr:\n%s", stderr.String())
	}
	up, _, creates := d.fleet.WebSocketStats()
	if up == 0 || creates == 0 {
		t.Fatalf("the turn did not reach the mock over the upstream WebSocket (upgrades %d, creates %d)\nstderr:\n%s", up, creates, stderr.String())
	}
	d.assertNoLeases(t)
}
