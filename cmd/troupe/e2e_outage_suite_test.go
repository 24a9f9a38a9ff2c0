package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// outageLoad drives requests at a gateway from several goroutines and
// keeps what the fault suite and the kill tests report: every request
// sent, the request ids of those served (200), the others by status.
type outageLoad struct {
	base, secret string
	streams      bool // every third request asks for a stream
	stop         atomic.Bool
	sent, failed atomic.Int64
	tick         chan struct{} // a request finished
	wg           sync.WaitGroup

	mu       sync.Mutex
	served   map[string]bool // X-Request-Id of each 200
	statuses map[string]int  // "503", "transport", … → count
}

// startLoad starts workers sending requests to the gateway at base with
// secret until halt.
func startLoad(base, secret string, workers int, streams bool) *outageLoad {
	l := &outageLoad{base: base, secret: secret, streams: streams, tick: make(chan struct{}, 1),
		served: map[string]bool{}, statuses: map[string]int{}}
	for w := range workers {
		l.wg.Go(func() { l.run(w) })
	}
	return l
}

// halt stops the workers and waits for them; requests cut by a kill meanwhile
// are not counted as failures.
func (l *outageLoad) halt() {
	l.stop.Store(true)
	l.wg.Wait()
}

// run sends requests until stop: Chat Completions and Responses
// alternately, non-stream and (with streams) stream.
func (l *outageLoad) run(w int) {
	for i := 0; !l.stop.Load(); i++ {
		path, body := "/chat/completions", `{"model":"`+demoOpenAIModel+`","messages":[{"role":"user","content":"hi"}]`
		if (w+i)%2 == 1 {
			path, body = "/responses", `{"model":"`+demoCodexModel+`","input":"hi"`
		}
		if l.streams && i%3 == 0 {
			body += `,"stream":true}`
		} else {
			body += `}`
		}
		id, status := l.one(path, body)
		if status != "200" && l.stop.Load() {
			return // cut by the end of the run
		}
		l.sent.Add(1)
		l.mu.Lock()
		if status == "200" {
			if l.served[id] {
				status = "repeated request id"
			} else {
				l.served[id] = true
			}
		}
		if status != "200" {
			l.failed.Add(1)
			l.statuses[status]++
		}
		l.mu.Unlock()
		select {
		case l.tick <- struct{}{}:
		default:
		}
	}
}

// one sends a request and reads the whole answer; status is "200" only
// when the answer arrived whole (a stream with its final event).
func (l *outageLoad) one(path, body string) (id, status string) {
	req, err := http.NewRequest(http.MethodPost, l.base+path, strings.NewReader(body))
	if err != nil {
		return "", "request"
	}
	req.Header.Set("Authorization", "Bearer "+l.secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := limitsClient.Do(req)
	if err != nil {
		return "", "transport"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "body cut"
	}
	if resp.StatusCode == 200 && strings.Contains(body, `"stream":true`) &&
		!strings.Contains(string(b), "[DONE]") && !strings.Contains(string(b), "response.completed") {
		return "", "stream cut"
	}
	return resp.Header.Get("X-Request-Id"), fmt.Sprint(resp.StatusCode)
}

// servedIDs returns the request ids of the served requests.
func (l *outageLoad) servedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.served))
	for id := range l.served {
		ids = append(ids, id)
	}
	return ids
}

func (l *outageLoad) servedCount() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.served))
}

// waitFor waits until count reaches target, failing t after two minutes.
func (l *outageLoad) waitFor(t *testing.T, what string, count func() int64, target int64) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for count() < target {
		select {
		case <-l.tick:
		case <-deadline:
			t.Fatalf("load stalled: %d of %d %s (%d failed: %v)", count(), target, what, l.failed.Load(), l.statuses)
		}
	}
}

// waitSent waits until n more requests have finished.
func (l *outageLoad) waitSent(t *testing.T, n int64) {
	t.Helper()
	l.waitFor(t, "requests sent", l.sent.Load, l.sent.Load()+n)
}

// waitServed waits until n requests in all have been served.
func (l *outageLoad) waitServed(t *testing.T, n int64) {
	t.Helper()
	l.waitFor(t, "requests served", l.servedCount, n)
}

// TestOutageFaultSuite is issue 16's fault suite: load through PostgreSQL
// and Redis — private servers of the test's own, never the machine's —
// while the database, the cache and then both are stopped and started
// again, with the gateway's key cache expiring during each database outage.
// It reports requests sent, served and failed, and the usage records lost
// and duplicated, which must be 0: every served request has exactly one
// record once storage is back, and the rollups count each once.
func TestOutageFaultSuite(t *testing.T) {
	pg := storagetest.StartPostgres(t)
	rd := cachetest.StartRedis(t)
	cfg := testConfig(t)
	cfg.Storage.Driver, cfg.Storage.DSN = "postgres", pg.URL()
	cfg.Cache.Driver, cfg.Cache.URL, cfg.Cache.Prefix = "redis", redisURL(t, rd.URL()), "troupe:"
	d := startTestDemo(t, cfg, fastAccounts(8))
	const big = 1 << 40 // limits on, so every request counts in the cache
	secret, _ := createKey(t, d.app.store, "suite", func(k *storage.APIKey) {
		k.Limits = storage.KeyLimits{RPM: big, RPD: big, TokensPerDay: big}
	})

	l := startLoad(d.base, secret, 8, true)
	defer l.halt()

	expire := func() { d.app.server.InvalidateKeys() } // the key cache's 30 s, run out
	phase := func(name string, n int64, during func()) {
		t.Helper()
		before, failedBefore := l.sent.Load(), l.failed.Load()
		if during != nil {
			during()
		}
		l.waitSent(t, n)
		t.Logf("%-22s %4d sent, %3d failed; journal %+v", name, l.sent.Load()-before, l.failed.Load()-failedBefore, d.app.journal.Stats())
	}
	phase("warm-up", 200, nil)
	phase("postgres stopped", 150, pg.Stop)
	phase("  key cache expired", 250, expire)
	phase("postgres started", 200, pg.Start)
	phase("redis killed", 300, rd.Kill)
	phase("redis started", 200, rd.Start)
	phase("both stopped", 150, func() { pg.Stop(); rd.Kill() })
	phase("  key cache expired", 250, expire)
	phase("both started", 300, func() { pg.Start(); rd.Start() })
	l.halt()

	journalDrained(t, d.app.journal, 60*time.Second)
	eventually(t, 60*time.Second, "storage healthy", func() (bool, string) { return !d.app.keys.Degraded(), "" })
	ctx := t.Context()
	db, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	stored := func() (map[string]bool, error) {
		rows, err := db.Query(ctx, "SELECT request_id FROM usage_records")
		if err != nil {
			return nil, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		m := make(map[string]bool, len(ids))
		for _, id := range ids {
			m[id] = true
		}
		return m, err
	}
	var lost int
	eventually(t, 30*time.Second, "a usage record for every served request", func() (bool, string) {
		ids, err := stored()
		if err != nil {
			return false, err.Error()
		}
		lost = 0
		for id := range l.served {
			if !ids[id] {
				lost++
			}
		}
		return lost == 0, fmt.Sprintf("%d served requests without a record", lost)
	})
	var records, distinct, rolled int64
	if err := db.QueryRow(ctx, "SELECT count(*), count(DISTINCT request_id), (SELECT coalesce(sum(requests), 0) FROM usage_hourly) FROM usage_records").
		Scan(&records, &distinct, &rolled); err != nil {
		t.Fatal(err)
	}
	duplicated := (records - distinct) + (rolled - records)
	t.Logf("fault suite: %d requests sent, %d served, %d failed %v; usage records: %d stored, %d lost, %d duplicated; journal: %+v",
		l.sent.Load(), len(l.served), l.failed.Load(), l.statuses, records, lost, duplicated, d.app.journal.Stats())
	if lost != 0 || duplicated != 0 {
		t.Errorf("usage records lost %d, duplicated %d: both must be 0", lost, duplicated)
	}
	if l.statuses["repeated request id"] > 0 {
		t.Errorf("%d answers repeated a request id", l.statuses["repeated request id"])
	}
	if l.failed.Load() > 0 {
		t.Errorf("%d of %d requests failed: %v", l.failed.Load(), l.sent.Load(), l.statuses)
	}
}
