package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/postgres"
	"github.com/troupe-gw/troupe/storage/rediscache"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/storage/storagetest"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// priced is an OpenAI upstream whose every answer reports 100 input tokens
// (20 of them cached) and 50 output tokens, on Chat and Responses, JSON and
// SSE; a Messages client reaches it translated.
type priced struct{}

const (
	chatUsage = `"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":20}}`
	respUsage = `"usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":20},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":150}`
)

func (priced) Do(_ context.Context, r *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	var body string
	switch {
	case r.Endpoint == translate.Chat && !r.Stream:
		h.Set("Content-Type", "application/json")
		body = `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` + chatUsage + `}`
	case r.Endpoint == translate.Chat:
		h.Set("Content-Type", "text/event-stream")
		body = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],` + chatUsage + `}` + "\n\n" +
			"data: [DONE]\n\n"
	case !r.Stream:
		h.Set("Content-Type", "application/json")
		body = `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}],` + respUsage + `}`
	default:
		h.Set("Content-Type", "text/event-stream")
		body = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"m\",\"output\":[],\"usage\":null}}\n\n" +
			"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m\",\"output\":[{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\",\"annotations\":[]}]}]," + respUsage + "}}\n\n"
	}
	return &upstream.Response{Status: 200, Header: h, Body: io.NopCloser(strings.NewReader(body))}, nil
}

// billed is a gateway over a store with the billing gate wired as
// cmd/troupe wires it: usage written through billing.CommitWriter.
type billed struct {
	s     *Server
	store storage.Store
	gate  *billing.Gate
	price storage.Price
	base  string
}

// billedServer is one instance over an in-memory SQLite store and a memory cache.
func billedServer(t *testing.T) *billed {
	t.Helper()
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{7, 1, 9, 3}, 8))
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(context.Background(), sqlite.MemoryPath, sealer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cache := memcache.New(memcache.Options{SweepInterval: -1})
	t.Cleanup(func() { cache.Close() })
	return billedOn(t, store, cache, setPrice(t, store))
}

// setPrice prices model m at $1000 / M input, $100 / M cached input,
// $2000 / M output: a request of the upstream above costs
// 80×1000 + 20×100 + 50×2000 = 182,000 micro-units.
func setPrice(t *testing.T, store storage.Store) storage.Price {
	t.Helper()
	p, err := store.PutPrice(context.Background(), storage.Price{Model: "m", Currency: "USD", Input: 1_000_000_000, CachedInput: 100_000_000,
		CacheWrite: billing.DefaultCacheWrite(1_000_000_000), Output: 2_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// billedOn is one gateway instance over store and cache.
func billedOn(t *testing.T, store storage.Store, cache storage.Cache, p storage.Price) *billed {
	t.Helper()
	// An output estimate of 64 tokens (128,000 micro-units) is below what a
	// request costs, so concurrent requests can overdraw: the bound is tested.
	gate := billing.New(store, cache, billing.Options{OutputEstimate: 64})
	if err := gate.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	sys := startSystem(t, actors.Config{Store: billing.CommitWriter(store, gate), UsageInterval: 5 * time.Millisecond,
		Transport: func(storage.Account) (upstream.Transport, error) { return priced{}, nil }})
	sys.PutAccount(storage.Account{ID: "a0", Name: "acct-0", Provider: storage.ProviderOpenAI, Models: []string{"m", "free"}, MaxConcurrency: 1 << 20})
	waitUntil(t, "the account to start", func() bool { return len(sys.Views()) >= 1 })
	s := New(Config{MaxWait: time.Second}, sys, store, cache, nil, nil)
	s.SetBilling(gate)
	ln := serveTCP(t, s)
	return &billed{s: s, store: store, gate: gate, price: p, base: "http://" + ln.Addr().String()}
}

// userKey creates a user with balance (micro-units) and a key of it.
func (b *billed) userKey(t *testing.T, u storage.User, balance int64) (storage.User, string) {
	t.Helper()
	u, err := b.store.CreateUser(context.Background(), u, storage.NewUser{Balance: balance, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	secret, k, err := NewKey(u.Name + "-key")
	if err != nil {
		t.Fatal(err)
	}
	k.UserID = u.ID
	if _, err := b.store.CreateAPIKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return u, secret
}

// post sends body to path with secret and returns the status and the whole answer.
func (b *billed) post(t *testing.T, path, secret, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", b.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, out
}

// settled waits until every finished request's charge is stored.
func (b *billed) settled(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.s.sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every charge stored", func() bool { return b.gate.Pending() == 0 })
}

// billingRequests are a request of every protocol, streamed and not; the
// Messages ones are translated to the OpenAI upstream.
var billingRequests = []struct{ path, body string }{
	{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	{"/v1/responses", `{"model":"m","input":"hi"}`},
	{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
	{"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
	{"/v1/messages", `{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
}

// TestBillingUntilRefused: a user with a small balance sends concurrent
// requests of every protocol, streamed and not, until each sender is
// refused for its balance. Then the balance is exactly the start minus the
// costs its usage records carry, each cost is the price of the record's
// own tokens, the ledger sums to the balance, and the balance never went
// below the documented bound: minus what the requests in flight could cost
// beyond their estimates (docs/billing.md; here the Messages requests ask
// max_tokens 1, so their estimate is below their cost and they can overdraw).
func TestBillingUntilRefused(t *testing.T) { runUntilRefused(t, billedServer(t)) }

// TestBillingUntilRefusedTwoInstances is TestBillingUntilRefused on
// PostgreSQL with two gateway instances sharing it and Redis: the senders
// alternate between the instances, whose holds are one per user in Redis.
func TestBillingUntilRefusedTwoInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("PostgreSQL and Redis: not in -short")
	}
	runUntilRefused(t, twoInstances(t)...)
}

// twoInstances starts two billed gateways sharing one PostgreSQL database
// (with a price set) and one Redis prefix.
func twoInstances(t *testing.T) []*billed {
	t.Helper()
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{7, 1, 9, 3}, 8))
	if err != nil {
		t.Fatal(err)
	}
	store, err := postgres.Open(context.Background(), storagetest.PostgresDB(t), sealer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	url := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, url)
	p := setPrice(t, store)
	var insts []*billed
	for range 2 {
		c, err := rediscache.New(context.Background(), url, rediscache.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		insts = append(insts, billedOn(t, store, c, p))
	}
	return insts
}

// runUntilRefused runs the senders against insts (in turn) and checks the
// outcome; insts share their store and cache.
func runUntilRefused(t *testing.T, insts ...*billed) {
	b := insts[0]
	const start = 8_000_000 // about 44 requests of 182,000
	u, secret := b.userKey(t, storage.User{Name: "small"}, start)
	const senders = 6
	var (
		wg       sync.WaitGroup
		refusals atomic.Int64
		served   atomic.Int64
	)
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < w+200; i++ {
				r := billingRequests[i%len(billingRequests)]
				status, body := insts[i%len(insts)].post(t, r.path, secret, r.body)
				switch {
				case status == 200:
					served.Add(1)
					continue
				case status == 429 && strings.HasPrefix(r.path, "/v1/messages"):
					t.Errorf("a Messages client refused with 429: %s", body)
				case status == 429:
					if e := gjson.GetBytes(body, "error"); e.Get("type").Str != "insufficient_quota" || e.Get("code").Str != "insufficient_quota" {
						t.Errorf("refusal %s, want OpenAI's insufficient_quota", body)
					}
				case status == 402:
					if !isAnthropicError(body, "billing_error") {
						t.Errorf("Messages refusal %s, want Anthropic's billing_error", body)
					}
				default:
					t.Errorf("%s: status %d: %s", r.path, status, body)
				}
				refusals.Add(1)
				return
			}
			t.Error("200 requests were not refused")
		}()
	}
	wg.Wait()
	for _, in := range insts {
		in.settled(t)
	}
	if refusals.Load() != senders || served.Load() < 20 {
		t.Fatalf("%d served, %d refused; want several served and every sender refused", served.Load(), refusals.Load())
	}
	recs, err := b.store.ListUsageRecords(context.Background(), storage.UsageRecordQuery{UserID: u.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var spent, maxCost int64
	for _, r := range recs {
		want := billing.Cost(b.price, 0, billing.Tokens{Input: r.InputTokens, Cached: r.CachedTokens, CacheWrite: r.CacheWriteTokens, Output: r.OutputTokens})
		if r.Cost != want {
			t.Errorf("record %s (%s): cost %d, its tokens price at %d", r.RequestID, r.Route, r.Cost, want)
		}
		if r.Status == 200 && r.Cost != 182_000 {
			t.Errorf("record %s (%s, stream %v): cost %d, want 182000: tokens %d/%d/%d", r.RequestID, r.Route, r.Stream, r.Cost, r.InputTokens, r.CachedTokens, r.OutputTokens)
		}
		spent += r.Cost
		maxCost = max(maxCost, r.Cost)
	}
	if int64(len(recs)) != served.Load()+refusals.Load() {
		t.Errorf("%d records, want %d", len(recs), served.Load()+refusals.Load())
	}
	bal := storagetest.CheckBalance(t, context.Background(), b.store, u.ID, start, spent)
	// The bound: at most senders requests were in flight at once, each
	// overdrawing by at most its cost.
	if bound := -int64(senders) * maxCost; bal < bound {
		t.Fatalf("balance %d below the bound %d", bal, bound)
	}
	t.Logf("%d served, %d refused, spent %d, final balance %d", served.Load(), refusals.Load(), spent, bal)
	if b.s.cache != nil {
		slot := time.Now().UnixMilli() / billing.DefaultHoldWindow.Milliseconds()
		if held, err := b.s.cache.Count(context.Background(), fmt.Sprintf("bill:hold:%s:%d", u.ID, slot), billing.DefaultHoldWindow); err != nil || held != 0 {
			t.Errorf("%d micro-units still held after every request settled (%v)", held, err)
		}
	}
}

// TestBillingUserLimits: a user's disabled state, model allowlist, unpriced
// models, requests per minute and requests in flight, and /v1/models
// listing only what the user may use; an operator key is untouched.
func TestBillingUserLimits(t *testing.T) {
	b := billedServer(t)
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	u, secret := b.userKey(t, storage.User{Name: "limited", RPM: 2}, 10_000_000)
	for i := range 2 {
		if status, body := b.post(t, "/v1/chat/completions", secret, chat); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	status, body := b.post(t, "/v1/chat/completions", secret, chat)
	if status != 429 || gjson.GetBytes(body, "error.code").Str != "rate_limit_exceeded" || !strings.Contains(string(body), "your account") {
		t.Fatalf("third request in a minute of an RPM-2 user: %d %s", status, body)
	}
	// Unpriced: the account serves "free" but it has no price.
	_, other := b.userKey(t, storage.User{Name: "allow", Models: []string{"m"}}, 10_000_000)
	if status, body := b.post(t, "/v1/chat/completions", other, `{"model":"free","messages":[{"role":"user","content":"hi"}]}`); status != 403 || gjson.GetBytes(body, "error.code").Str != "model_not_allowed" {
		t.Fatalf("a model outside the allowlist: %d %s", status, body)
	}
	// An unpriced model has its own code, and says what to do.
	_, open := b.userKey(t, storage.User{Name: "open"}, 10_000_000)
	if status, body := b.post(t, "/v1/chat/completions", open, `{"model":"free","messages":[{"role":"user","content":"hi"}]}`); status != 403 ||
		gjson.GetBytes(body, "error.code").Str != "model_not_priced" || !strings.Contains(string(body), "troupe prices set free") {
		t.Fatalf("an unpriced model: %d %s", status, body)
	}
	// /v1/models lists the priced models only, for a user.
	req, _ := http.NewRequest("GET", b.base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+open)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ids := gjson.GetBytes(list, "data.#.id").String(); ids != `["m"]` {
		t.Fatalf("/v1/models for a user lists %s, want only the priced m", ids)
	}
	// Disabled: refused as an unusable key.
	u.Disabled = true
	if _, err := b.store.UpdateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if err := b.gate.Reload(context.Background()); err != nil { // as the billing broadcast does
		t.Fatal(err)
	}
	if status, body := b.post(t, "/v1/chat/completions", secret, chat); status != 401 || !strings.Contains(string(body), "disabled user") {
		t.Fatalf("a disabled user's key: %d %s", status, body)
	}
	b.settled(t)
	// Concurrency: a held slot refuses the next request.
	cu, csecret := b.userKey(t, storage.User{Name: "conc", MaxConcurrency: 1}, 10_000_000)
	tk, ref := b.gate.Admit(context.Background(), billing.Request{ID: "held", UserID: cu.ID, Model: "m", Input: 1, MaxOutput: 1})
	if ref != nil {
		t.Fatal(ref)
	}
	if status, body := b.post(t, "/v1/chat/completions", csecret, chat); status != 429 || !strings.Contains(string(body), "in flight") {
		t.Fatalf("a request beyond the user's concurrency: %d %s", status, body)
	}
	rec := storage.UsageRecord{RequestID: "held"}
	b.gate.Finish(tk, &rec)
	if status, body := b.post(t, "/v1/chat/completions", csecret, chat); status != 200 {
		t.Fatalf("after the slot was freed: %d %s", status, body)
	}
	// An operator key is never billed.
	secretOp, k, err := NewKey("operator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.CreateAPIKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if status, body := b.post(t, "/v1/chat/completions", secretOp, `{"model":"free","messages":[{"role":"user","content":"hi"}]}`); status != 200 {
		t.Fatalf("an operator key on an unpriced model: %d %s", status, body)
	}
	b.settled(t)
}

// TestKeyLimitsTwoInstances: an API key's requests-per-minute limit and its
// user's are counted in the shared cache, so two instances on one Redis
// admit exactly the limit between them (issue 17 item 6), whichever
// instance each request reaches.
func TestKeyLimitsTwoInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("PostgreSQL and Redis: not in -short")
	}
	insts := twoInstances(t)
	store := insts[0].store
	send := func(secret string, n int) (ok, limited int) {
		for i := range n {
			status, body := insts[i%2].post(t, "/v1/chat/completions", secret, billingRequests[0].body)
			switch status {
			case 200:
				ok++
			case 429:
				limited++
			default:
				t.Fatalf("request %d: %d %s", i, status, body)
			}
		}
		return ok, limited
	}
	// exactly sends n requests with a new key of mk's within one minute
	// window (a run across a window boundary starts a new count: it is run
	// again with a fresh key) and wants limit of them admitted.
	exactly := func(what string, mk func(i int) string, n, limit int) {
		for i := 0; ; i++ {
			secret := mk(i)
			minute := time.Now().Truncate(time.Minute)
			ok, limited := send(secret, n)
			if !time.Now().Truncate(time.Minute).Equal(minute) && i < 3 {
				continue
			}
			if ok != limit || limited != n-limit {
				t.Fatalf("%s over two instances: %d admitted, %d refused, want %d and %d", what, ok, limited, limit, n-limit)
			}
			return
		}
	}
	ctx := context.Background()
	exactly("the key's RPM 3", func(i int) string {
		u, err := store.CreateUser(ctx, storage.User{Name: fmt.Sprintf("keyed-%d", i)}, storage.NewUser{Balance: 100_000_000, Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		secret, k, err := NewKey(u.Name + "-key")
		if err != nil {
			t.Fatal(err)
		}
		k.UserID, k.Limits = u.ID, storage.KeyLimits{RPM: 3}
		if _, err := store.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		return secret
	}, 8, 3)
	exactly("the user's RPM 2", func(i int) string {
		_, secret := insts[0].userKey(t, storage.User{Name: fmt.Sprintf("user-limited-%d", i), RPM: 2}, 100_000_000)
		return secret
	}, 6, 2)
}
