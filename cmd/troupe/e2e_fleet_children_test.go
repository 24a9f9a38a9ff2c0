package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
func (c *serveChild) ownedAccounts() int { return int(c.metric("troupe_fleet_owned_accounts")) }

// metric reads an instance's metric line that starts with series (name
// and labels), -1 when absent or unreadable.
func (c *serveChild) metric(series string) float64 {
	resp, err := http.Get(c.base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return -1
}

// fleetView is what the fleet e2e tests read of an instance's GET
// /api/admin/fleet.
type fleetView struct {
	Self    string `json:"self"`
	Members []struct {
		ID string `json:"id"`
	} `json:"members"`
	Accounts []struct {
		ID    string `json:"id"`
		Owner string `json:"owner"` // by rendezvous hashing over the members it sees
		Held  bool   `json:"held"`  // it holds the account's ownership lease
	} `json:"accounts"`
	Owned       int `json:"owned"` // accounts running here, not draining
	RemoteViews int `json:"remote_views"`
}

// fleetView reads c's GET /api/admin/fleet with the admin key secret.
func (c *serveChild) fleetView(secret string) (fleetView, error) {
	var fv fleetView
	req, _ := http.NewRequest(http.MethodGet, c.base+"/api/admin/fleet", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fv, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fv, fmt.Errorf("GET /api/admin/fleet: %d", resp.StatusCode)
	}
	return fv, json.NewDecoder(resp.Body).Decode(&fv)
}

// settled waits until the fleet of gws has settled, and returns each
// account's owner: every instance sees the same len(gws) members, and
// every account is held by exactly one instance, the one rendezvous
// hashing names over that set, which runs it (none draining) while the
// others index its view. Until then accounts may still move: the first
// instance owns them all alone, and they move as the others join and as
// each instance sees the joins at its own heartbeat; a test that checks
// or holds leases before would see requests served by an account about
// to move.
func (f *fleetFixture) settled(gws ...*serveChild) map[string]*serveChild {
	f.t.Helper()
	var owners map[string]*serveChild
	eventually(f.t, 60*time.Second, fmt.Sprintf("the fleet of %d instances settled", len(gws)), func() (bool, string) {
		owners = map[string]*serveChild{}
		views := make([]fleetView, len(gws))
		for i, g := range gws {
			fv, err := g.fleetView(f.secret)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", g.base, err)
			}
			views[i] = fv
		}
		var members string
		for i, fv := range views {
			var ids []string
			for _, m := range fv.Members {
				ids = append(ids, m.ID)
			}
			slices.Sort(ids)
			seen := strings.Join(ids, ",")
			if len(ids) != len(gws) || (i > 0 && seen != members) {
				return false, fmt.Sprintf("%s sees members %s", fv.Self, seen)
			}
			members = seen
		}
		for i, fv := range views {
			if len(fv.Accounts) != len(f.names) {
				return false, fmt.Sprintf("%s lists %d accounts, want %d", fv.Self, len(fv.Accounts), len(f.names))
			}
			held := 0
			for _, a := range fv.Accounts {
				if !a.Held {
					continue
				}
				held++
				if a.Owner != fv.Self {
					return false, fmt.Sprintf("%s holds %s, which rendezvous hashing gives %s", fv.Self, a.ID, a.Owner)
				}
				if owners[a.ID] != nil {
					return false, fmt.Sprintf("%s held by two instances", a.ID)
				}
				owners[a.ID] = gws[i]
			}
			if fv.Owned != held || fv.RemoteViews != len(f.names)-held {
				return false, fmt.Sprintf("%s holds %d accounts, runs %d, indexes %d of the others'", fv.Self, held, fv.Owned, fv.RemoteViews)
			}
		}
		return len(owners) == len(f.names), fmt.Sprintf("%d of %d accounts held", len(owners), len(f.names))
	})
	return owners
}

// fleetTTL is the fleet.ttl of the fleet e2e tests' instances (heartbeat
// 200 ms): short, so a killed instance's accounts move within seconds.
const fleetTTL = 2 * time.Second

// fleetFixture is what the fleet e2e tests share: a PostgreSQL database and
// a Redis prefix of their own, the troupe binary, a mock upstream that
// counts answers in flight per credential, n accounts on it (60 ms per
// answer, max_concurrency limit) stored with an admin API key, and the
// environment of `troupe serve` with fleet.ownership on.
type fleetFixture struct {
	t      *testing.T
	bin    string
	up     *mock.Fleet
	names  map[string]string // account ID → the mock's account name
	secret string            // the admin API key, for /v1 and /api/admin
	env    []string
}

// newFleetFixture sets up a fleet test's storage, cache, mock and accounts;
// key names the API key.
func newFleetFixture(t *testing.T, key string, accounts, limit int) *fleetFixture {
	t.Helper()
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	f := &fleetFixture{t: t, bin: buildTroupe(t), up: mock.New(mock.Config{}), names: map[string]string{}}
	mockAddr, err := f.up.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.up.Close() })
	master := newMasterKey(t)
	cfg := testConfig(t)
	cfg.Storage.Driver, cfg.Storage.DSN, cfg.Storage.MasterKey = "postgres", pg, master
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for i := range accounts {
		ma, sa := demoAccountAs(i+1, "openai", mockAddr)
		ma.Latency, ma.TokensPerSecond = 60*time.Millisecond, 0
		sa.MaxConcurrency = limit
		f.up.Add(ma)
		stored, err := store.PutAccount(ctx, sa)
		if err != nil {
			t.Fatal(err)
		}
		f.names[stored.ID] = ma.Name
	}
	secret, k, err := gateway.NewKey(key)
	if err != nil {
		t.Fatal(err)
	}
	k.Admin = true // reads /api/admin/fleet
	if _, err := store.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	f.secret = secret
	f.env = []string{"TROUPE_LISTEN=127.0.0.1:0", "TROUPE_LOG_LEVEL=info",
		"TROUPE_STORAGE_DRIVER=postgres", "TROUPE_STORAGE_DSN=" + pg, "TROUPE_STORAGE_MASTER_KEY=" + master,
		"TROUPE_CACHE_DRIVER=redis", "TROUPE_CACHE_URL=" + cachetest.SlackURL(rurl), "TROUPE_CACHE_PREFIX=" + prefix,
		"TROUPE_FLEET_OWNERSHIP=true", "TROUPE_FLEET_TTL=" + fleetTTL.String(), "TROUPE_FLEET_HEARTBEAT=200ms",
		"TROUPE_GATEWAY_MAX_WAIT=30s"}
	return f
}

// start runs one more instance, with a data directory of its own and extra
// environment.
func (f *fleetFixture) start(extra ...string) *serveChild {
	f.t.Helper()
	env := append(slices.Clone(f.env), "TROUPE_DATA_DIR="+f.t.TempDir())
	return startServeChild(f.t, f.bin, append(env, extra...)...)
}
