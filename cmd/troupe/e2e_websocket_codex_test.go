package main

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/clienttest"
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

	home := codexHome(t, d, "gpt-5.5", true)
	stdout, stderr := clienttest.Run(t, "codex exec", 90*time.Second, bin, codexEnv(t, d, home),
		"exec", "--skip-git-repo-check", "Say hi in one short sentence.")
	if !strings.Contains(stdout, "from demo-") {
		t.Fatalf("codex stdout lacks the mock answer (\"from demo-\")\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	if strings.Contains(stderr, "Falling back from WebSockets") {
		t.Fatalf("codex fell back to HTTPS\nstderr:\n%s", stderr)
	}
	up, _, creates := d.fleet.WebSocketStats()
	if up == 0 || creates == 0 {
		t.Fatalf("the turn did not reach the mock over the upstream WebSocket (upgrades %d, creates %d)\nstderr:\n%s", up, creates, stderr)
	}
	d.assertNoLeases(t)
}
