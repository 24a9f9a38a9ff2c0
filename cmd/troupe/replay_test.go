package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/storage"
)

// openDataDir opens the embedded storage of data directory dir.
func openDataDir(t *testing.T, dir string) storage.Store {
	t.Helper()
	cfg, err := loadConfig("", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	s, err := openStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// replayStore fills a data dir with three accounts, a key and a request log
// served by acct-a (whose priority is lowest), with a failure of acct-c.
func replayStore(t *testing.T) (dir string, at time.Time) {
	t.Helper()
	dir = t.TempDir()
	ctx := context.Background()
	s := openDataDir(t, dir)
	defer s.Close()
	ids := map[string]string{}
	for i, n := range []string{"acct-a", "acct-b", "acct-c"} {
		a, err := s.PutAccount(ctx, storage.Account{Name: n, Provider: storage.ProviderOpenAI, Models: []string{"gpt-4.1-mini"},
			MaxConcurrency: 4, Priority: i, Credentials: storage.Credentials{APIKey: "sk-test"}})
		if err != nil {
			t.Fatal(err)
		}
		ids[n] = a.ID
	}
	k := storage.APIKey{Name: "app", Hash: storage.HashKey("sk-troupe-replay-test")}
	k, err := s.CreateAPIKey(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	at = time.Now().Add(-time.Hour).UTC()
	recs := make([]storage.UsageRecord, 10)
	for i := range recs {
		recs[i] = storage.UsageRecord{RequestID: fmt.Sprintf("req-%02d", i), At: at.Add(time.Duration(i) * time.Second), KeyID: k.ID,
			AccountID: ids["acct-a"], Model: "gpt-4.1-mini", Route: "chat.completions", Status: 200, Attempts: 1,
			Decision: "policy=smart@1 via=score candidates=3 top=acct-a:100:healthy chosen=acct-a"}
	}
	// The last request failed on acct-a (502): failed requests are in the
	// request log and are replayed as routed too.
	recs[9].Status, recs[9].ErrorClass = 502, "transient"
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// acct-c failed with a 401 just before the last five requests: from
	// then on it is unauthorized and no candidate.
	ev := storage.ErrorEvent{RequestID: "req-05", Attempt: 1, At: at.Add(4500 * time.Millisecond), AccountID: ids["acct-c"], Class: "auth", Status: 401}
	if err := s.InsertErrorEvents(ctx, []storage.ErrorEvent{ev}); err != nil {
		t.Fatal(err)
	}
	return dir, at
}

// A policy that prefers the highest priority sends the first five requests
// to acct-c, and after acct-c's recorded 401 the rest to acct-b; the replay
// shows every move against what was served.
func TestPolicyReplay(t *testing.T) {
	dir, _ := replayStore(t)
	pol := filepath.Join(t.TempDir(), "by_priority.lua")
	src := "function score(a, now)\n  if a.status ~= \"active\" then return nil end\n  return a.priority\nend\n"
	if err := os.WriteFile(pol, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "policy", "replay", pol, "--data", dir, "--since", "2h", "--show", "3")
	for _, want := range []string{
		"policy by_priority replayed over 10 requests",
		"1 failed attempts fed back",
		"1 of the replayed requests had failed",
		"same account: 0 (0.0%)  different: 10 (100.0%)",
		// acct-a served all ten; the replay sends five to acct-c, five to acct-b.
		"spread as served:   busiest account 10 requests (100.00%; even 33.33%)",
		"1 of 3 accounts used",
		"spread as replayed: busiest account 5 requests (50.00%; even 33.33%)",
		"2 of 3 accounts used",
		"acct-a     acct-c       5",
		"acct-a     acct-b       5",
		"req-00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
	// The policy that served (lowest priority first) changes nothing.
	same := filepath.Join(t.TempDir(), "low.lua")
	if err := os.WriteFile(same, []byte("function score(a, now)\n  return -a.priority\nend\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := mustCLI(t, "policy", "replay", same, "--data", dir, "--since", "2h"); !strings.Contains(out, "same account: 10 (100.0%)") {
		t.Errorf("replaying the served choice:\n%s", out)
	}
	if _, _, err := runCLI(t, "policy", "replay", same, "--data", dir, "--since", "-1h"); err == nil {
		t.Error("a negative --since was accepted")
	}
}

// A request that gets no account in the replay is explained: here only
// acct-c may serve, and after its recorded 401 it rests, so the last five
// requests find every matching account resting.
func TestPolicyReplayExplainsNoAccount(t *testing.T) {
	dir, _ := replayStore(t)
	pol := filepath.Join(t.TempDir(), "only_c.lua")
	src := "function score(a, now)\n  if a.status ~= \"active\" or a.priority ~= 2 then return nil end\n  return 1\nend\n"
	if err := os.WriteFile(pol, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "policy", "replay", pol, "--data", dir, "--since", "2h")
	for _, want := range []string{"no account: 5 (50.0%)", "  no account, 5: " + routing.CauseResting} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
}

// The replay runs on the recorded time: acct-b's 429 at 6.5 s cools it for
// its 30 s backoff in the window's timeline, so it is out
// for the requests at 7–9 s and back for those at 40 and 41 s, however
// fast the replay runs (on the wall clock it would rest for the rest of
// the replay).
func TestPolicyReplayCooldownTimeline(t *testing.T) {
	dir, at := replayStore(t)
	ctx := context.Background()
	s := openDataDir(t, dir)
	accts, err := s.ListAccounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, a := range accts {
		ids[a.Name] = a.ID
	}
	keys, err := s.ListAPIKeys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v %v", keys, err)
	}
	var later []storage.UsageRecord
	for i, sec := range []int{40, 41} {
		later = append(later, storage.UsageRecord{RequestID: fmt.Sprintf("req-late-%d", i), At: at.Add(time.Duration(sec) * time.Second),
			KeyID: keys[0].ID, AccountID: ids["acct-a"], Model: "gpt-4.1-mini", Route: "chat.completions", Status: 200, Attempts: 1})
	}
	if err := s.InsertUsage(ctx, later); err != nil {
		t.Fatal(err)
	}
	ev := storage.ErrorEvent{RequestID: "req-06", Attempt: 1, At: at.Add(6500 * time.Millisecond), AccountID: ids["acct-b"], Class: "rate", Status: 429}
	if err := s.InsertErrorEvents(ctx, []storage.ErrorEvent{ev}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	pol := filepath.Join(t.TempDir(), "by_priority.lua")
	src := `function score(a, now)
  if a.status == "cooling" and a.cooldown_until and a.cooldown_until > now then
    return nil, nil, a.cooldown_until - now
  end
  if a.status ~= "active" and a.status ~= "cooling" then return nil end
  return a.priority
end
`
	if err := os.WriteFile(pol, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "policy", "replay", pol, "--data", dir, "--since", "2h")
	for _, want := range []string{
		"policy by_priority replayed over 12 requests",
		"2 failed attempts fed back",
		"same account: 3 (25.0%)  different: 9 (75.0%)",
		"acct-a     acct-c       5",
		"acct-a     acct-b       4",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
}
