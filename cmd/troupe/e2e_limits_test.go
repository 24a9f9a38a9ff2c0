package main

// End-to-end tests of per-key limits through the real gateway: RPM, RPD,
// tokens per day, model allowlist, expiry, disabled keys and key changes
// announced through the cache; limits exact across two instances sharing
// PostgreSQL and Redis; and Redis stopped under load.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// fastAccounts are demo accounts 1..n answering at once with 5 tokens.
func fastAccounts(n int) accountsFunc {
	return tuned(span(1, n, 1), func(ma *mock.Account, sa *storage.Account) {
		ma.Latency, ma.TokensPerSecond, ma.OutputTokens = time.Millisecond, 0, 5
		sa.MaxConcurrency = 16
	})
}

var limitsClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// callGateway sends one non-stream request for model to the gateway at base
// (…/v1) with secret: Chat Completions for the openai demo model, Responses
// otherwise. It returns the status, headers and body.
func callGateway(base, secret, model string) (int, http.Header, []byte, error) {
	path, body := "/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`
	if model == demoCodexModel {
		path, body = "/responses", `{"model":"`+model+`","input":"hi"}`
	}
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := limitsClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// status sends one request and returns its status, failing t on a transport error.
func status(t *testing.T, base, secret, model string) int {
	t.Helper()
	st, _, _, err := callGateway(base, secret, model)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	return st
}

// answer is one gateway answer: its status, head and body.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// send sends n requests for the openai demo model to base with secret, one
// after another, failing t on a transport error.
func send(t *testing.T, base, secret string, n int) []answer {
	t.Helper()
	out := make([]answer, n)
	for i := range out {
		st, h, b, err := callGateway(base, secret, demoOpenAIModel)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		out[i] = answer{st, h, b}
	}
	return out
}

// statuses lists the answers' statuses.
func statuses(as []answer) []int {
	out := make([]int, len(as))
	for i, a := range as {
		out[i] = a.status
	}
	return out
}

// inOneWindow runs try, whose requests must all count in one epoch-aligned
// window of length w (a limit's minute or day), and returns its answers.
// A run that started in one window and ended in the next had its counts
// split between them and is not judged: try runs again (with a fresh key:
// it gets the run's number), at most three times. The gateway's counters
// and the test read the same clock.
func inOneWindow[T any](t *testing.T, w time.Duration, try func(run int) T) T {
	t.Helper()
	window := func() int64 { return time.Now().UnixNano() / int64(w) }
	for run := range 3 {
		before := window()
		got := try(run)
		if window() == before {
			return got
		}
		t.Logf("run %d straddled two %v windows: not judged", run+1, w)
	}
	t.Fatalf("three runs each straddled two %v windows", w)
	var none T
	return none
}

// wantStatuses checks the answers' statuses, in order.
func wantStatuses(t *testing.T, what string, as []answer, want ...int) {
	t.Helper()
	if got := statuses(as); !slices.Equal(got, want) {
		t.Fatalf("%s: statuses %v, want %v", what, got, want)
	}
}

// wantLimited checks a 429 in OpenAI's error shape with a Retry-After of 1..max seconds.
func wantLimited(t *testing.T, what string, a answer, typ string, max int) {
	t.Helper()
	wantError(t, what, &http.Response{StatusCode: a.status, Header: a.header}, a.body, 429, typ, "rate_limit_exceeded")
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > max {
		t.Errorf("%s: Retry-After %q, want 1..%d seconds", what, a.header.Get("Retry-After"), max)
	}
}

// createKey creates an API key named name with the given limits in the
// demo's store and returns its secret and stored form.
func createKey(t *testing.T, s storage.Store, name string, edit func(*storage.APIKey)) (string, storage.APIKey) {
	t.Helper()
	secret, k, err := gateway.NewKey(name)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&k)
	}
	k, err = s.CreateAPIKey(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

// TestKeyLimits checks every per-key limit through the gateway on the
// embedded storage and the in-memory cache, with keys made and changed by
// the CLI on the gateway's data directory.
func TestKeyLimits(t *testing.T) {
	clearTroupeEnv(t)
	d := startTestDemo(t, nil, fastAccounts(4))
	dir := d.app.cfg.DataDir
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, "--data", dir)...) }
	newKey := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(cli(append([]string{"keys", "create"}, args...)...))
	}

	t.Run("rpm", func(t *testing.T) {
		as := inOneWindow(t, time.Minute, func(run int) []answer {
			k := newKey("--name", "rpm-"+strconv.Itoa(run), "--rpm", "3")
			return send(t, d.base, k, 5)
		})
		wantStatuses(t, "5 requests in a minute, 3 allowed", as, 200, 200, 200, 429, 429)
		wantLimited(t, "4th request in the minute", as[3], "requests", 60)
		wantLimited(t, "5th request in the minute", as[4], "requests", 60)
		if st := status(t, d.base, d.apiKey, demoOpenAIModel); st != 200 {
			t.Errorf("another key: status %d, want 200 (limits are per key)", st)
		}
	})

	t.Run("rpd", func(t *testing.T) {
		as := inOneWindow(t, 24*time.Hour, func(run int) []answer {
			k := newKey("--name", "rpd-"+strconv.Itoa(run), "--rpd", "2")
			return send(t, d.base, k, 3)
		})
		wantStatuses(t, "3 requests in a day, 2 allowed", as, 200, 200, 429)
		wantLimited(t, "3rd request in the day", as[2], "requests", 86400)
	})

	t.Run("tokens per day", func(t *testing.T) {
		// What one request costs: input + output tokens of its answer.
		st, _, body, err := callGateway(d.base, d.apiKey, demoOpenAIModel)
		if err != nil || st != 200 {
			t.Fatalf("probe: %d %v", st, err)
		}
		var ans struct {
			Usage struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &ans); err != nil {
			t.Fatal(err)
		}
		cost := ans.Usage.Prompt + ans.Usage.Completion
		if cost <= 0 {
			t.Fatalf("probe answer has no usage: %s", body)
		}
		// A budget of two requests: the third finds it spent.
		as := inOneWindow(t, 24*time.Hour, func(run int) []answer {
			k := newKey("--name", "tpd-"+strconv.Itoa(run), "--tokens-per-day", strconv.FormatInt(2*cost, 10))
			return send(t, d.base, k, 3)
		})
		wantStatuses(t, fmt.Sprintf("3 requests of %d tokens on a budget of %d", cost, 2*cost), as, 200, 200, 429)
		wantLimited(t, "request after the daily tokens were used", as[2], "tokens", 86400)
	})

	t.Run("model allowlist", func(t *testing.T) {
		k := newKey("--name", "models", "--models", demoOpenAIModel)
		if st := status(t, d.base, k, demoOpenAIModel); st != 200 {
			t.Errorf("allowed model: status %d", st)
		}
		st, h, body, err := callGateway(d.base, k, demoCodexModel)
		if err != nil {
			t.Fatal(err)
		}
		e := wantError(t, "model outside the allowlist", &http.Response{StatusCode: st, Header: h}, body, 403, "permission_error", "model_not_allowed")
		if e.Param == nil || *e.Param != "model" {
			t.Errorf("param %v, want \"model\"", strPtr(e.Param))
		}
	})

	t.Run("expired", func(t *testing.T) {
		k := newKey("--name", "expired", "--expires", "2020-01-01T00:00:00Z")
		st, h, body, _ := callGateway(d.base, k, demoOpenAIModel)
		wantError(t, "expired key", &http.Response{StatusCode: st, Header: h}, body, 401, "invalid_request_error", "invalid_api_key")
		k = newKey("--name", "off", "--disabled")
		st, h, body, _ = callGateway(d.base, k, demoOpenAIModel)
		wantError(t, "key created disabled", &http.Response{StatusCode: st, Header: h}, body, 401, "invalid_request_error", "invalid_api_key")
	})

	t.Run("disable and enable", func(t *testing.T) {
		k := newKey("--name", "toggle")
		if st := status(t, d.base, k, demoOpenAIModel); st != 200 {
			t.Fatalf("new key: status %d", st)
		}
		cli("keys", "update", "toggle", "--disable")
		// The gateway caches key lookups (30 s): the change is not seen yet…
		if st := status(t, d.base, k, demoOpenAIModel); st != 200 {
			t.Errorf("right after --disable, before the announcement: status %d, want 200 (cached)", st)
		}
		// …until it is announced on the cache's "keys" channel, which the CLI
		// does with a shared cache (Redis) and this test does in-process.
		if err := d.app.cache.Publish(t.Context(), admin.KeysChannel, "updated toggle"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "disabled key refused", func() (bool, string) {
			st := status(t, d.base, k, demoOpenAIModel)
			return st == 401, strconv.Itoa(st)
		})
		cli("keys", "update", "toggle", "--enable")
		d.app.server.InvalidateKeys()
		if st := status(t, d.base, k, demoOpenAIModel); st != 200 {
			t.Errorf("after --enable: status %d", st)
		}
	})
}

// redisURL returns the test Redis's URL with timeouts long enough that a
// machine loaded by the race detector and parallel test packages does not
// take a slow reply for an outage (which would make limits per instance).
func redisURL(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for _, p := range []string{"dial_timeout", "read_timeout", "write_timeout", "pool_timeout"} {
		q.Set(p, "2s")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// metric returns the value of the unlabelled metric name scraped from the
// gateway at addr (-1 when absent).
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := limitsClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	return -1
}

// startPeer starts a second gateway on cfg's storage and cache, serving the
// accounts already stored there, and stops it when t ends.
func startPeer(t *testing.T, cfg *Config, n int) *app {
	t.Helper()
	logs := &syncBuffer{}
	a, err := startApp(t.Context(), cfg, newLogger(cfg, logs))
	if err != nil {
		t.Fatalf("second instance: %v", err)
	}
	serveTestApp(t, a, logs, n, "second instance")
	return a
}

// TestKeyLimitsAcrossInstances runs two gateways on one PostgreSQL database
// and one Redis (same prefix): an RPM limit of 10 admits exactly 10 of 20
// concurrent requests spread over both, and a key disabled with the CLI is
// refused by both at once (announced through Redis), then accepted again.
func TestKeyLimitsAcrossInstances(t *testing.T) {
	clearTroupeEnv(t)
	rurl := cachetest.RedisURL(t)
	cfg := testConfig(t)
	cfg.Storage.Driver, cfg.Storage.DSN = "postgres", storagetest.PostgresDB(t)
	cfg.Storage.MasterKey = newMasterKey(t)
	cfg.Cache.Driver, cfg.Cache.URL, cfg.Cache.Prefix = "redis", redisURL(t, rurl), cachetest.RedisPrefix(t, rurl)
	d := startTestDemo(t, cfg, fastAccounts(4))
	peerCfg := *cfg
	peerCfg.DataDir = t.TempDir()
	peer := startPeer(t, &peerCfg, 4)
	bases := []string{d.base, peer.baseURL()}

	const limit, requests = 10, 20
	type tally struct{ ok, limited int64 }
	got := inOneWindow(t, time.Minute, func(run int) tally {
		secret, _ := createKey(t, d.app.store, "shared-"+strconv.Itoa(run), func(k *storage.APIKey) { k.Limits.RPM = limit })
		var ok, limited atomic.Int64
		var other sync.Map
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range requests {
			wg.Go(func() {
				<-start
				st, _, body, err := callGateway(bases[i%2], secret, demoOpenAIModel)
				switch {
				case err != nil:
					other.Store(i, err.Error())
				case st == 200:
					ok.Add(1)
				case st == 429:
					limited.Add(1)
				default:
					other.Store(i, fmt.Sprintf("%d %.200s", st, body))
				}
			})
		}
		close(start)
		wg.Wait()
		other.Range(func(k, v any) bool { t.Errorf("request %v: %v", k, v); return true })
		return tally{ok.Load(), limited.Load()}
	})
	for i, a := range []*app{d.app, peer} {
		if n := metric(t, a.addr(), "troupe_cache_outages_total"); n != 0 {
			t.Errorf("instance %d saw %v cache outages during the test: limits were local for a while", i, n)
		}
	}
	if got.ok != limit || got.limited != requests-limit {
		t.Fatalf("RPM %d over two instances: %d admitted, %d refused with 429; want exactly %d and %d",
			limit, got.ok, got.limited, limit, requests-limit)
	}

	// A change made with the CLI reaches both instances through Redis.
	toggle, _ := createKey(t, d.app.store, "toggle", nil)
	for _, b := range bases {
		if st := status(t, b, toggle, demoOpenAIModel); st != 200 {
			t.Fatalf("toggle key on %s: %d", b, st)
		}
	}
	cfgPath := configFile(t, cfg)
	_, errOut, err := runCLI(t, "keys", "update", "toggle", "--disable", "-c", cfgPath)
	if err != nil {
		t.Fatalf("keys update --disable: %v (%s)", err, errOut)
	}
	if strings.Contains(errOut, "warning") {
		t.Errorf("keys update could not announce the change: %s", errOut)
	}
	for _, b := range bases {
		eventually(t, 3*time.Second, "disabled key refused by "+b, func() (bool, string) {
			st := status(t, b, toggle, demoOpenAIModel)
			return st == 401, strconv.Itoa(st)
		})
	}
	mustCLI(t, "keys", "update", "toggle", "--enable", "-c", cfgPath)
	for _, b := range bases {
		eventually(t, 3*time.Second, "enabled key accepted by "+b, func() (bool, string) {
			st := status(t, b, toggle, demoOpenAIModel)
			return st == 200, strconv.Itoa(st)
		})
	}
	mustCLI(t, "keys", "revoke", "toggle", "-c", cfgPath)
	for _, b := range bases {
		eventually(t, 3*time.Second, "revoked key refused by "+b, func() (bool, string) {
			st := status(t, b, toggle, demoOpenAIModel)
			return st == 401, strconv.Itoa(st)
		})
	}
}

// TestRedisStoppedMidLoad serves steady load with keys whose limits make
// every request use the cache (Redis, a private redis-server), kills Redis
// mid-load and starts it again on the same port: no client request fails,
// troupe_cache_degraded is 1 during the outage and 0 after it, and the
// limit counters are written to the new Redis again.
func TestRedisStoppedMidLoad(t *testing.T) {
	srv := cachetest.StartRedis(t)
	cfg := testConfig(t)
	// Long timeouts keep a loaded machine's slow replies from looking like an
	// outage; a killed Redis is noticed at once anyway (its sockets close).
	cfg.Cache.Driver, cfg.Cache.URL, cfg.Cache.Prefix = "redis", redisURL(t, srv.URL()), "troupe:"
	d := startTestDemo(t, cfg, fastAccounts(4))
	const big = 1 << 40
	secret, key := createKey(t, d.app.store, "loaded", func(k *storage.APIKey) {
		k.Limits = storage.KeyLimits{RPM: big, RPD: big, TokensPerDay: big}
	})
	rc := srv.Client()
	rpmCounter := func() int64 {
		n, err := rc.HGet(context.Background(), "troupe:c:60000:rl:rpm:"+key.ID, "n").Int64()
		if err != nil {
			return 0
		}
		return n
	}
	addr := d.app.addr()

	var (
		stop     atomic.Bool
		served   atomic.Int64
		failures atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				model := demoOpenAIModel
				if w%2 == 1 {
					model = demoCodexModel
				}
				st, _, body, err := callGateway(d.base, secret, model)
				if err == nil && st != 200 {
					err = fmt.Errorf("status %d: %.200s", st, body)
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				served.Add(1)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	eventually(t, 5*time.Second, "limit counters in Redis", func() (bool, string) {
		n := rpmCounter()
		return n > 20, fmt.Sprintf("rpm counter %d", n)
	})
	eventually(t, 5*time.Second, "troupe_cache_degraded 0 before the outage", func() (bool, string) {
		v := metric(t, addr, "troupe_cache_degraded")
		return v == 0, fmt.Sprint(v)
	})

	srv.Kill()
	killed, atKill := time.Now(), served.Load()
	eventually(t, 5*time.Second, "troupe_cache_degraded 1", func() (bool, string) {
		v := metric(t, addr, "troupe_cache_degraded")
		return v == 1, fmt.Sprint(v)
	})
	t.Logf("degraded %v after Redis was killed", time.Since(killed).Round(time.Millisecond))
	eventually(t, 30*time.Second, "requests served during the outage", func() (bool, string) {
		n := served.Load() - atKill
		return n >= 50, fmt.Sprintf("%d served since the kill", n)
	})
	duringOutage := served.Load() - atKill

	srv.Start()
	restarted := time.Now()
	eventually(t, 10*time.Second, "troupe_cache_degraded back to 0", func() (bool, string) {
		v := metric(t, addr, "troupe_cache_degraded")
		return v == 0, fmt.Sprint(v)
	})
	t.Logf("healthy %v after Redis answered again", time.Since(restarted).Round(time.Millisecond))
	eventually(t, 5*time.Second, "limit counters written to the new Redis", func() (bool, string) {
		n := rpmCounter()
		return n > 20, fmt.Sprintf("rpm counter %d", n)
	})
	// Redis back: response affinity works again through it.
	checkAffinity(t, d, secret)
	afterRecovery := served.Load()
	eventually(t, 30*time.Second, "requests served after the recovery", func() (bool, string) {
		n := served.Load() - afterRecovery
		return n >= 50, fmt.Sprintf("%d served since", n)
	})
	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests served, %d during the outage; %v outages", served.Load(), duringOutage, metric(t, addr, "troupe_cache_outages_total"))
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d client requests failed; first: %v", n, firstErr.Load())
	}
}
