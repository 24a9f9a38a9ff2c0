package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

func schedulerPolicy(t *testing.T, d *testDemo) (string, uint64) {
	st, err := d.app.sys.SchedulerStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Policy, st.PolicyVersion
}

// The active policy follows its file: a save swaps it in (new version), a
// broken save is refused with its line and the last good policy keeps serving.
func TestPolicyHotReloadFromFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mine.lua")
	write := func(src string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("function score(a, now)\n  if a.status ~= \"active\" then return nil end\n  return 1\nend\n")
	cfg := testConfig(t)
	cfg.Policies.Dir, cfg.Policies.Active = dir, "mine"
	d := startTestDemo(t, cfg, tuned(span(1, 4, 1), nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.app.watchPolicies(ctx)

	eventually(t, 5*time.Second, "scheduler runs mine", func() (bool, string) {
		name, v := schedulerPolicy(t, d)
		return name == "mine", fmt.Sprintf("%s v%d", name, v)
	})
	// A file is no stored version: every load of it is version 0; a swap
	// shows as a new digest.
	if _, v := schedulerPolicy(t, d); v != 0 {
		t.Errorf("a policy file runs as version %d, want 0 (not stored)", v)
	}
	d1 := d.app.policies.Active().Digest()

	// The watcher starts asynchronously: save (then stay quiet past its
	// debounce) until it has seen a save.
	swapped := false
	for try := 0; try < 10 && !swapped; try++ {
		write("function score(a, now)\n  if a.status ~= \"active\" then return nil end\n  return 2\nend\n")
		for wait := time.Now().Add(time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
			if d.app.policies.Active().Digest() != d1 {
				swapped = true
				break
			}
		}
	}
	if !swapped {
		t.Fatal("a saved policy file was never swapped in")
	}
	d2 := d.app.policies.Active().Digest()

	write("function score(a, now)\n  return a.missing.field\nend\n")
	eventually(t, 10*time.Second, "the broken save is reported", func() (bool, string) {
		st := d.app.policies.Status()
		return !st.OK && st.Line == 2, fmt.Sprintf("%+v", st)
	})
	if dg := d.app.policies.Active().Digest(); dg != d2 {
		t.Fatalf("a broken policy replaced %s with %s", d2[:12], dg[:12])
	}
	// Requests are still served by the last good policy.
	resp, body := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("after a broken save: %d %s", resp.StatusCode, body)
	}
}

// 50 policy switches during a 5,000-request run through the whole gateway:
// zero failed requests.
func TestPolicySwitchesThroughGateway(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(2, 40, 2), func(ma *mock.Account, sa *storage.Account) {
		ma.Latency, ma.TokensPerSecond = 0, 0
		sa.MaxConcurrency = 8
	}))
	names := []string{"smart", "round_robin", "least_inflight", "sticky", "quota_reset", "weighted"}
	const total, switches = 5000, 50
	var failed, done, next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= total {
				body, want := `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`, "from demo-"
				if next.Load()%2 == 0 {
					body, want = `{"model":"gpt-4.1-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "data: [DONE]"
				}
				resp, out := d.post(t, "/v1/chat/completions", body)
				if resp.StatusCode != 200 || !bytes.Contains(out, []byte(want)) {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, out))
				}
				done.Add(1)
			}
		})
	}
	switched := 0
	deadline := time.Now().Add(2 * time.Minute)
	for switched < switches && time.Now().Before(deadline) {
		if done.Load() >= int64(switched*total/switches) {
			if _, err := d.app.policies.SetActive(names[switched%len(names)]); err != nil {
				t.Fatal(err)
			}
			switched++
			continue
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if failed.Load() != 0 || done.Load() != total || switched != switches {
		t.Fatalf("%d of %d requests failed, %d switches; first failure: %v", failed.Load(), done.Load(), switched, firstErr.Load())
	}
}

func TestPolicyCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.lua")
	os.WriteFile(good, []byte("policy = { top_k = 2, jitter = 0.1 }\nfunction score(a, now)\n  if a.status ~= \"active\" then return nil end\n  return 100 - a.failure_streak\nend\n"), 0o600)
	bad := filepath.Join(dir, "bad.lua")
	os.WriteFile(bad, []byte("function score(a, now)\n  os.execute(\"true\")\nend\n"), 0o600)
	var out bytes.Buffer
	cmd := rootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"policy", "check", good})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "policy good: ok") || !strings.Contains(out.String(), "RANK") ||
		!strings.Contains(out.String(), "counters read (a change of any other counter keeps the score): failure_streak\n") ||
		!strings.Contains(out.String(), "sample pool: 23 synthetic accounts, not yours") || !regexp.MustCompile(`(?m)^\d+ +flaky .* eight failures in a row`).MatchString(out.String()) {
		t.Fatalf("check good: %v\n%s", err, out.String())
	}
	cmd = rootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"policy", "check", bad})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "bad:2") {
		t.Fatalf("check bad: want an error at line 2, got %v", err)
	}
	// A built-in by name, when no such file exists.
	out.Reset()
	cmd = rootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"policy", "check", "round_robin"})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "policy round_robin: ok") {
		t.Fatalf("check round_robin: %v\n%s", err, out.String())
	}
	cmd = rootCmd()
	cmd.SetArgs([]string{"policy", "check", "no_such_policy"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "nor is it a built-in policy: ") {
		t.Fatalf("check no_such_policy: %v", err)
	}
	out.Reset()
	cmd = rootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"policy", "simulate", good, "--accounts", "20", "--requests", "500", "--concurrency", "4"})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "500 requests over 20 accounts, 0 not served") {
		t.Fatalf("simulate: %v\n%s", err, out.String())
	}
	// The default policy over equal accounts: every one used, a low Gini.
	out.Reset()
	cmd = rootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"policy", "simulate", "smart", "--accounts", "50", "--requests", "1000", "--concurrency", "4", "--all-healthy"})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "\nspread: busiest account ") ||
		!strings.Contains(out.String(), "Gini 0.0") || !strings.Contains(out.String(), "50 of 50 accounts used") {
		t.Fatalf("simulate --all-healthy: %v\n%s", err, out.String())
	}
}
