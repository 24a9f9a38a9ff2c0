package main

import (
	"bufio"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--listen", "127.0.0.1:0", "--accounts", "20", "--data", dir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TROUPE_LOG_LEVEL=warn"}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("troupe demo stderr:\n%s", stderr.String())
		}
	}()
	var base, secret string
	sc := bufio.NewScanner(stdout)
	for (base == "" || secret == "") && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "TROUPE_BASE_URL="); ok {
			base = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "TROUPE_API_KEY="); ok {
			secret = v
		}
	}
	if base == "" || secret == "" {
		t.Fatalf("troupe demo did not print its URL and key (scan: %v)", sc.Err())
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() { // drain the rest of stdout until the process dies
		}
	}()

	const workers = 8
	var (
		stop     atomic.Bool
		ok       atomic.Int64
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			model := demoOpenAIModel
			if w%2 == 1 {
				model = demoCodexModel
			}
			for !stop.Load() {
				st, _, _, err := callGateway(base, secret, model)
				if err == nil && st == 200 {
					ok.Add(1)
				} else if !stop.Load() {
					failures.Add(1)
				}
			}
		})
	}
	// Kill at a random moment of the recorder's flush cycle.
	load := 1500*time.Millisecond + rand.N(time.Second)
	time.Sleep(load)
	// SIGKILL: no shutdown hook runs, the recorder's memory is lost. (stop
	// first, so that the requests the kill breaks are not counted as failures.)
	stop.Store(true)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	<-drained
	cmd.Wait()
	killed = true
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Errorf("the race detector reported a data race in troupe demo")
	}
	wg.Wait()
	successes := ok.Load()
	if f := failures.Load(); f > 0 {
		t.Errorf("%d requests failed before the kill", f)
	}
	if successes < 50 {
		t.Fatalf("only %d successful answers in %v: too little load to measure", successes, load)
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
