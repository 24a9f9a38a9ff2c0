package routing

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// replayLog is a ReplayStore in memory.
type replayLog struct {
	recs     []storage.UsageRecord
	events   []storage.ErrorEvent
	accounts []storage.Account
}

func (l *replayLog) UsageRecords(context.Context, storage.RequestLogQuery) ([]storage.UsageRecord, error) {
	return l.recs, nil
}

func (l *replayLog) ErrorEvents(context.Context, storage.RequestLogQuery) ([]storage.ErrorEvent, error) {
	return l.events, nil
}

func (l *replayLog) ListAccounts(context.Context) ([]storage.Account, error) { return l.accounts, nil }
func (l *replayLog) ListAPIKeys(context.Context) ([]storage.APIKey, error)   { return nil, nil }

// A replay reports its progress step by step, and how evenly the requests
// spread as served (all on one account, as smart did before issue 18) and
// as replayed with the default policy, over the accounts that serve the
// requests' model only (those of another model do not count).
func TestReplayProgressAndSpread(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	log := &replayLog{}
	for i := range 20 {
		m := "m"
		if i >= 10 {
			m = "other" // ten accounts of another model: not part of the spread
		}
		log.accounts = append(log.accounts, storage.Account{ID: fmt.Sprintf("a%02d", i), Name: fmt.Sprintf("acct-%02d", i),
			Provider: storage.ProviderOpenAI, Models: []string{m}, MaxConcurrency: 4})
	}
	for i := range 40 {
		log.recs = append(log.recs, storage.UsageRecord{RequestID: fmt.Sprintf("req-%02d", i), At: at.Add(time.Duration(i) * time.Second),
			AccountID: "a00", Model: "m", Route: translate.Chat.Route(), Status: 200, Latency: time.Second})
	}
	log.events = []storage.ErrorEvent{{RequestID: "req-05", Attempt: 1, At: at.Add(4500 * time.Millisecond), AccountID: "a01", Class: "transient", Status: 502}}

	src, _ := scripts.Builtin("smart")
	var steps []int
	total := -1
	rep, err := Replay(context.Background(), log, compile(t, "smart", src), storage.RequestLogQuery{From: at, To: at.Add(time.Hour)},
		ReplayOptions{Progress: func(done, n int) {
			steps = append(steps, done)
			if total >= 0 && n != total {
				t.Errorf("total changed from %d to %d", total, n)
			}
			total = n
		}})
	if err != nil {
		t.Fatal(err)
	}
	if total != 41 || len(steps) != 42 {
		t.Fatalf("progress: total %d, %d reports, want 41 and 42", total, len(steps))
	}
	for i, d := range steps {
		if d != i {
			t.Fatalf("progress reports %v, want 0, 1, …, 41", steps)
		}
	}
	if rep.Total() != 40 {
		t.Fatalf("replayed %d requests", rep.Total())
	}
	if s := rep.Served; s.Accounts != 10 || s.Busiest != 40 || s.Serving != 1 || math.Abs(s.Gini-0.9) > 1e-9 {
		t.Errorf("spread as served: %+v", s)
	}
	// The account that just failed drops a band: the nine others take turns.
	if s := rep.Replayed; s.Accounts != 10 || s.Requests != 40 || s.Busiest > 5 || s.Gini > 0.15 {
		t.Errorf("spread as replayed: %s", s)
	}
}
