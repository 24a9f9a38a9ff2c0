package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// serveChild is a `troupe serve` subprocess.
type serveChild struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	stderr *syncBuffer
}

var listeningAt = regexp.MustCompile(`msg="troupe listening" addr=(\S+)`)

// startServeChild runs bin serve with env and waits until it listens and answers /readyz.
func startServeChild(t *testing.T, bin string, env ...string) *serveChild {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdout = io.Discard
	pr, pw := io.Pipe()
	c := &serveChild{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		pw.Close()
		if t.Failed() {
			t.Logf("instance %s log:\n%s", c.base, c.stderr.String())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			c.stderr.Write([]byte(line + "\n"))
			if m := listeningAt.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		c.base = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatalf("troupe serve did not listen within 60 s:\n%s", c.stderr.String())
	}
	return c
}

// ownedAccounts reads an instance's troupe_fleet_owned_accounts (-1 when unreadable).
func (c *serveChild) ownedAccounts() int {
	resp, err := http.Get(c.base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "troupe_fleet_owned_accounts "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return -1
}

// TestFleetKill runs three real `troupe serve` processes with
// fleet.ownership on one PostgreSQL and Redis, in front of a mock upstream
// that counts answers in flight per credential. Under concurrent load
// spread over the three, no account ever has more than its max_concurrency
// in flight. Then one instance is killed with SIGKILL: every account
// serves again from the two survivors within the TTLs, and still none is
// over-admitted.
func TestFleetKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three gateways")
	}
	clearTroupeEnv(t)
	const (
		// 30 accounts so that each of three instances owns some: with 12,
		// rendezvous hashing leaves one owning none in about 2 % of runs.
		accounts = 30
		limit    = 2
		ttl      = 2 * time.Second
	)
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	bin := buildTroupe(t)

	up := mock.New(mock.Config{})
	mockAddr, err := up.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	master := newMasterKey(t)
	cfg := testConfig(t)
	cfg.Storage.Driver, cfg.Storage.DSN, cfg.Storage.MasterKey = "postgres", pg, master
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range accounts {
		ma, sa := demoAccountAs(i+1, "openai", mockAddr)
		ma.Latency, ma.TokensPerSecond = 60*time.Millisecond, 0
		sa.MaxConcurrency = limit
		up.Add(ma)
		if _, err := store.PutAccount(ctx, sa); err != nil {
			t.Fatal(err)
		}
		names = append(names, ma.Name)
	}
	secret, key, err := gateway.NewKey("fleet-kill")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateAPIKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	store.Close()

	env := []string{"TROUPE_LISTEN=127.0.0.1:0", "TROUPE_LOG_LEVEL=info",
		"TROUPE_STORAGE_DRIVER=postgres", "TROUPE_STORAGE_DSN=" + pg, "TROUPE_STORAGE_MASTER_KEY=" + master,
		"TROUPE_CACHE_DRIVER=redis", "TROUPE_CACHE_URL=" + rurl, "TROUPE_CACHE_PREFIX=" + prefix,
		"TROUPE_FLEET_OWNERSHIP=true", "TROUPE_FLEET_TTL=" + ttl.String(), "TROUPE_FLEET_HEARTBEAT=200ms",
		"TROUPE_GATEWAY_MAX_WAIT=30s"}
	var gws []*serveChild
	for i := range 3 {
		gws = append(gws, startServeChild(t, bin, append(env, "TROUPE_DATA_DIR="+t.TempDir(), fmt.Sprintf("TROUPE_FLEET_ADDR=gw-%d", i))...))
	}
	eventually(t, 30*time.Second, "the accounts split over three instances", func() (bool, string) {
		var n []int
		sum := 0
		for _, g := range gws {
			o := g.ownedAccounts()
			n = append(n, o)
			sum += o
		}
		return sum == accounts && n[0] > 0 && n[1] > 0 && n[2] > 0, fmt.Sprintf("owned %v", n)
	})

	client := &http.Client{Timeout: 60 * time.Second}
	load := func(to []*serveChild, n int) []string {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var fails []string
		for i := range n {
			g := to[i%len(to)]
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					fails = append(fails, err.Error())
					mu.Unlock()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("%d %s", resp.StatusCode, body))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return fails
	}
	overAdmitted := func(when string) {
		t.Helper()
		for _, name := range names {
			if st := up.Stats(name); st.MaxInFlight > limit {
				t.Errorf("%s: account %s had %d answers in flight, max_concurrency %d", when, name, st.MaxInFlight, limit)
			}
		}
	}
	if fails := load(gws, 150); len(fails) > 0 {
		t.Fatalf("%d of 150 requests failed, first: %s", len(fails), fails[0])
	}
	overAdmitted("three instances")
	served := 0
	for _, name := range names {
		if up.Stats(name).Requests > 0 {
			served++
		}
	}
	if served != accounts {
		t.Fatalf("%d of %d accounts served under load over three instances", served, accounts)
	}

	// kill -9 the third: its accounts serve again from the two others.
	killed := gws[2]
	lost := killed.ownedAccounts()
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	up.ResetStats()
	survivors := gws[:2]
	eventually(t, 30*time.Second, "the survivors own every account", func() (bool, string) {
		a, b := survivors[0].ownedAccounts(), survivors[1].ownedAccounts()
		return a+b == accounts, fmt.Sprintf("owned %d + %d", a, b)
	})
	recovered := time.Since(at)
	t.Logf("the killed instance's %d accounts owned again %v after the kill (fleet.ttl %v, heartbeat 200ms)", lost, recovered.Round(10*time.Millisecond), ttl)
	if recovered > 3*ttl {
		t.Errorf("recovery took %v, want within about the TTL (%v) and a few heartbeats", recovered, ttl)
	}
	if fails := load(survivors, 150); len(fails) > 0 {
		t.Fatalf("%d of 150 requests failed after the kill, first: %s", len(fails), fails[0])
	}
	overAdmitted("after the kill")
	for _, name := range names {
		if up.Stats(name).Requests == 0 {
			t.Errorf("account %s not served by the survivors", name)
		}
	}
}
