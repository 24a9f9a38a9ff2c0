package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/clienttest"
)

// codexBin finds the pinned Codex CLI: $TROUPE_CODEX_BIN, else the copy
// `make clients` installs under .cache/npm. It skips the test when there is
// none, unless TROUPE_REQUIRE_CLIENTS=1.
func codexBin(t *testing.T) string {
	t.Helper()
	return clienttest.Bin(t, "TROUPE_CODEX_BIN", "codex", "Codex CLI", requireClients())
}

// requireClients reports whether TROUPE_REQUIRE_CLIENTS=1 (make test): a
// missing real client then fails the test instead of skipping it.
func requireClients() bool { return os.Getenv("TROUPE_REQUIRE_CLIENTS") == "1" }

// codexHome is a CODEX_HOME whose config.toml points Codex at the demo
// gateway (provider troupe, API key from $TROUPE_API_KEY) with model.
func codexHome(t *testing.T, d *testDemo, model string, websockets bool) string {
	t.Helper()
	return clienttest.CodexHome(t, clienttest.CodexConfig{Model: model, Provider: "troupe", Name: "Troupe",
		BaseURL: d.base, EnvKey: "TROUPE_API_KEY", WebSockets: websockets})
}

// codexEnv is the isolated environment of a Codex run against the demo.
func codexEnv(t *testing.T, d *testDemo, home string) []string {
	return clienttest.Env("CODEX_HOME="+home, "HOME="+t.TempDir(), "TROUPE_API_KEY="+d.apiKey)
}

// TestCodexCLI runs the real Codex CLI (codex exec) against the gateway in
// front of the mock fleet: it must exit 0 and print the mock's answer.
func TestCodexCLI(t *testing.T) {
	bin := codexBin(t)
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	home := codexHome(t, d, "gpt-5.5", false)
	stdout, stderr := clienttest.Run(t, "codex exec", 90*time.Second, bin, codexEnv(t, d, home),
		"exec", "--skip-git-repo-check", "Say hi in one short sentence.")
	if !strings.Contains(stdout, "from demo-") {
		t.Fatalf("codex stdout lacks the mock answer (\"from demo-\")\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
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
