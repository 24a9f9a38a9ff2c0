package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// buildTroupe builds the troupe binary into a temporary directory (with the
// race detector when the tests have it, so the build reuses their compiled
// packages) and returns its path.
func buildTroupe(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "troupe")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, goBin, append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built troupe in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// demoChild is a `troupe demo` subprocess.
type demoChild struct {
	cmd          *exec.Cmd
	base, secret string
	stderr       *syncBuffer
	drained      chan struct{} // closed when its stdout ends (it exited)
	exited       bool
}

// startDemoChild runs bin as `troupe demo --accounts 20 --data dir` with
// env added to a minimal environment, and waits until it prints its URL
// and key. It is killed when t ends, if still running.
func startDemoChild(t *testing.T, bin, dir string, env ...string) *demoChild {
	t.Helper()
	cmd := exec.Command(bin, "demo", "--listen", "127.0.0.1:0", "--accounts", "20", "--data", dir)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TROUPE_LOG_LEVEL=warn"}, env...)
	c := &demoChild{cmd: cmd, stderr: &syncBuffer{}, drained: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() {
			t.Logf("troupe demo stderr:\n%s", c.stderr.String())
		}
	})
	sc := bufio.NewScanner(stdout)
	for (c.base == "" || c.secret == "") && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "TROUPE_BASE_URL="); ok {
			c.base = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "TROUPE_API_KEY="); ok {
			c.secret = v
		}
	}
	if c.base == "" || c.secret == "" {
		t.Fatalf("troupe demo did not print its URL and key (scan: %v)\n%s", sc.Err(), c.stderr.String())
	}
	go func() {
		defer close(c.drained)
		for sc.Scan() { // drain the rest of stdout until the process dies
		}
	}()
	return c
}

// kill kills the child with SIGKILL (no shutdown hook runs) and waits for
// it; it checks the race detector's verdict.
func (c *demoChild) kill(t *testing.T) {
	if c.exited {
		return
	}
	c.exited = true
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Error(err)
	}
	<-c.drained
	c.cmd.Wait()
	if strings.Contains(c.stderr.String(), "DATA RACE") {
		t.Errorf("the race detector reported a data race in troupe demo")
	}
}

// TestKillMidLoad runs `troupe demo` as a subprocess, drives load through it
// from 8 goroutines counting successful answers, kills it with SIGKILL
// mid-load, then counts the usage records in its database. Every successful
// answer was handed to the usage recorder before it was sent, so the records
// lost are those the recorder held in memory: at most the records accepted
// in the last flush interval plus one batch being written (interval × rate +
// batch size; docs/storage.md). The measured loss is logged.
func TestKillMidLoad(t *testing.T) {
	bin := buildTroupe(t)
	dir := t.TempDir()
	child := startDemoChild(t, bin, dir)
	base, secret := child.base, child.secret

	const workers = 8
	start := time.Now()
	l := startLoad(base, secret, workers, false)
	// Kill after enough answers that the bound below (its constant part is
	// one batch, 500) says something, however long a busy machine takes to
	// serve them, at a random moment of the recorder's flush cycle.
	l.waitServed(t, 1000+rand.N(int64(1000)))
	// SIGKILL: no shutdown hook runs, the recorder's memory is lost. (stop
	// first, so that the requests the kill breaks are not counted as failures.)
	l.stop.Store(true)
	child.kill(t)
	elapsed := time.Since(start)
	l.halt()
	successes := l.servedCount()
	if f := l.failed.Load(); f > 0 {
		t.Errorf("%d requests failed before the kill: %v", f, l.statuses)
	}

	cfg := testConfig(t)
	cfg.DataDir = dir
	s, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatalf("open the killed demo's store: %v", err)
	}
	defer s.Close()
	records, err := s.CountUsage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rate := float64(successes) / elapsed.Seconds()
	bound := int64(rate*usageInterval.Seconds()) + usageBatch
	lost := successes - records
	t.Logf("kill -9 after %d successful answers in %v (%.0f/s): %d usage records stored, %d lost (%.0f ms of traffic); bound %.0f/s × %v + %d = %d",
		successes, elapsed.Round(time.Millisecond), rate, records, lost, float64(lost)/rate*1000, rate, usageInterval, usageBatch, bound)
	if lost > bound {
		t.Errorf("lost %d usage records, more than the bound %d", lost, bound)
	}
	// An answer in flight when the process died may be recorded although
	// its client never got it: at most one per worker.
	if records > successes+workers {
		t.Errorf("%d records for %d successful answers (+%d in flight at most)", records, successes, workers)
	}
}

// TestKillDuringOutage is the hard-kill bound during a storage outage: a
// `troupe demo` child on a private PostgreSQL serves load; the database is
// stopped, so usage records go to the journal; the child is killed with
// SIGKILL mid-outage; the database is started and the child restarted on
// the same data directory, which writes the journal to storage. Every
// answer served before the kill must then have its record, except at most
// the bound of docs/storage.md (rate × 0.25 s + 500) — the records the
// recorder held in memory — and none twice.
func TestKillDuringOutage(t *testing.T) {
	pg := storagetest.StartPostgres(t)
	bin := buildTroupe(t)
	dir := t.TempDir()
	env := []string{"TROUPE_STORAGE_DRIVER=postgres", "TROUPE_STORAGE_DSN=" + pg.URL()}
	child := startDemoChild(t, bin, dir, env...)

	l := startLoad(child.base, child.secret, 8, false)
	l.waitServed(t, 200)
	pg.Stop()
	outageFrom := l.servedCount()
	start := time.Now()
	l.waitServed(t, outageFrom+200+rand.N(int64(200))) // kill at a random moment of the recorder's cycle
	l.stop.Store(true)
	child.kill(t)
	elapsed := time.Since(start)
	l.halt()
	journal, err := os.Stat(filepath.Join(dir, "usage.journal"))
	if err != nil || journal.Size() == 0 {
		t.Fatalf("no usage journal after a kill during the outage: %v, %v", journal, err)
	}
	if f := l.failed.Load(); f > 0 {
		t.Errorf("%d requests failed before the kill: %v", f, l.statuses)
	}

	pg.Start()
	again := startDemoChild(t, bin, dir, env...)
	eventually(t, 60*time.Second, "the restarted demo wrote the journal", func() (bool, string) {
		fi, err := os.Stat(filepath.Join(dir, "usage.journal"))
		return err == nil && fi.Size() == 0, fmt.Sprint(fi.Size())
	})
	again.kill(t)

	ctx := t.Context()
	db, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, "SELECT request_id FROM usage_records")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	stored := make(map[string]bool, len(ids))
	for _, id := range ids {
		stored[id] = true
	}
	var records, rolled int64
	if err := db.QueryRow(ctx, "SELECT count(*), (SELECT coalesce(sum(requests), 0) FROM usage_hourly) FROM usage_records").Scan(&records, &rolled); err != nil {
		t.Fatal(err)
	}
	lost := 0
	served := l.servedIDs()
	for _, id := range served {
		if !stored[id] {
			lost++
		}
	}
	during := int64(len(served)) - outageFrom
	rate := float64(during) / elapsed.Seconds()
	bound := int(rate*usageInterval.Seconds()) + usageBatch
	t.Logf("kill -9 %v into a PostgreSQL outage: %d answers (%d during it, %.0f/s), journal %d bytes; after the restart %d records, %d lost (%.0f ms of traffic), %d counted twice; bound %d",
		elapsed.Round(time.Millisecond), len(served), during, rate, journal.Size(), records, lost, float64(lost)/rate*1000, rolled-records, bound)
	if lost > bound {
		t.Errorf("lost %d usage records, more than the bound %d", lost, bound)
	}
	if rolled != records {
		t.Errorf("rollups count %d requests for %d records", rolled, records)
	}
}
