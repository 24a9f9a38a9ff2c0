package main

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// capOutput is the output cap of TestBillingOutputCap's requests, above
// the gate's 1,024-token floor (billing.DefaultOutputEstimate) so that the
// estimate counts it as given, and below what the accounts would answer
// without it (capAnswer).
const (
	capOutput = 2000
	capAnswer = 3000
)

// capRequests are a request of every protocol the caps hold for
// (docs/billing.md, "Which caps hold"), streamed and not, each with the
// protocol's own cap field, and how its answer says the cap cut it.
var capRequests = []struct{ path, body, cut string }{
	{"/v1/chat/completions", `{"model":"gpt-4.1-mini","max_tokens":2000,"messages":[{"role":"user","content":"Tell me a long story."}]}`, `"finish_reason":"length"`},
	{"/v1/chat/completions", `{"model":"gpt-4.1-mini","max_completion_tokens":2000,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Tell me a long story."}]}`, `"finish_reason":"length"`},
	{"/v1/responses", `{"model":"gpt-4.1-mini","max_output_tokens":2000,"input":"Tell me a long story."}`, `"reason":"max_output_tokens"`},
	{"/v1/responses", `{"model":"gpt-4.1-mini","max_output_tokens":2000,"stream":true,"input":"Tell me a long story."}`, `event: response.incomplete`},
	{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":2000,"messages":[{"role":"user","content":"Tell me a long story."}]}`, `"stop_reason":"max_tokens"`},
	{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":2000,"stream":true,"messages":[{"role":"user","content":"Tell me a long story."}]}`, `"stop_reason":"max_tokens"`},
	// translated: a Chat client on an Anthropic account, its cap sent as max_tokens
	{"/v1/chat/completions", `{"model":"claude-sonnet-4-5","max_completion_tokens":2000,"messages":[{"role":"user","content":"Tell me a long story."}]}`, `"finish_reason":"length"`},
}

// TestBillingOutputCap: a user with a small balance sends, from several
// senders at once, requests whose output cap bounds answers that would
// otherwise be longer, on the mock fleet's openai and anthropic accounts
// (which cut at the cap as the real APIs do), until each sender is refused
// for its balance. Every answer says the cap cut it; every served request's
// usage record counts exactly the cap's output tokens and its cost is the
// price of its own tokens; the balance is the start minus those costs and
// the ledger's sum; and the balance never went below the documented bound
// (docs/billing.md, "Holds, and the overdraft bound"): with a cap the
// account holds, a request exceeds its estimate only through its input, so
// the balance stays above minus the input cost of the requests that can be
// in flight at once.
func TestBillingOutputCap(t *testing.T) {
	accounts := func(addr string) ([]mock.Account, []storage.Account) {
		var fa []mock.Account
		var pa []storage.Account
		for i, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderAnthropic, storage.ProviderOpenAI, storage.ProviderAnthropic} {
			ma, sa := demoAccountAs(i+1, p, addr)
			ma.OutputTokens, ma.TokensPerSecond, ma.Latency = capAnswer, 0, 0
			fa, pa = append(fa, ma), append(pa, sa)
		}
		return fa, pa
	}
	d := startTestDemo(t, nil, accounts)
	ctx := t.Context()
	// 1,000 micro-units an input token, 4,000 an output token: a capped
	// answer's output costs 8,000,000, an uncapped one's 12,000,000.
	var price storage.Price
	for _, m := range []string{demoOpenAIModel, demoAnthropicModel} {
		p, err := d.app.store.PutPrice(ctx, storage.Price{Model: m, Currency: "USD", Input: 1_000_000_000, CachedInput: 1_000_000_000,
			CacheWrite: billing.DefaultCacheWrite(1_000_000_000), Output: 4_000_000_000})
		if err != nil {
			t.Fatal(err)
		}
		price = p
	}
	if err := d.app.billing.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	const start = 50_000_000 // about six capped requests
	u, err := d.app.store.CreateUser(ctx, storage.User{Name: "capped"}, storage.NewUser{Balance: start, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := createKey(t, d.app.store, "capped-key", func(k *storage.APIKey) { k.UserID = u.ID })

	const senders = 3
	var (
		wg               sync.WaitGroup
		served, refusals atomic.Int64
	)
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < w+50; i++ {
				r := capRequests[i%len(capRequests)]
				resp, body := d.do(t, "POST", r.path, strings.NewReader(r.body), map[string]string{
					"Authorization": "Bearer " + secret, "Content-Type": "application/json", "anthropic-version": "2023-06-01"})
				switch {
				case resp.StatusCode == 200:
					if !strings.Contains(string(body), r.cut) {
						t.Errorf("%s %s: the answer does not say the cap cut it (%s):\n%.600s", r.path, r.body, r.cut, body)
					}
					served.Add(1)
					continue
				case resp.StatusCode == 429 && r.path != "/v1/messages":
					if gjson.GetBytes(body, "error.code").Str != "insufficient_quota" {
						t.Errorf("refusal %s, want insufficient_quota", body)
					}
				case resp.StatusCode == 402 && r.path == "/v1/messages":
					if gjson.GetBytes(body, "error.type").Str != "billing_error" {
						t.Errorf("refusal %s, want billing_error", body)
					}
				default:
					t.Errorf("%s: status %d: %s", r.path, resp.StatusCode, body)
				}
				refusals.Add(1)
				return
			}
			t.Error("50 requests were not refused")
		}()
	}
	wg.Wait()
	usageSettled(t, d.app)
	eventually(t, 30*time.Second, "every charge stored", func() (bool, string) {
		n := d.app.billing.Pending()
		return n == 0, fmt.Sprintf("%d charges pending", n)
	})
	if refusals.Load() != senders || served.Load() < 3 {
		t.Fatalf("%d served, %d refused; want several served and every sender refused", served.Load(), refusals.Load())
	}

	recs, err := d.app.store.ListUsageRecords(ctx, storage.UsageRecordQuery{UserID: u.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var spent, maxInputCost int64
	for _, r := range recs {
		want := billing.Cost(price, billing.UnitMultiplier, billing.Tokens{Input: r.InputTokens, Cached: r.CachedTokens, CacheWrite: r.CacheWriteTokens, Output: r.OutputTokens})
		if r.Cost != want {
			t.Errorf("record %s (%s): cost %d, its tokens price at %d", r.RequestID, r.Route, r.Cost, want)
		}
		if r.Status == 200 && (r.OutputTokens != capOutput || r.Estimated) {
			t.Errorf("record %s (%s, stream %v): %d output tokens (estimated %v), want the cap's %d", r.RequestID, r.Route, r.Stream, r.OutputTokens, r.Estimated, capOutput)
		}
		spent += r.Cost
		maxInputCost = max(maxInputCost, billing.Cost(price, billing.UnitMultiplier, billing.Tokens{Input: r.InputTokens, Cached: r.CachedTokens, CacheWrite: r.CacheWriteTokens}))
	}
	if int64(len(recs)) != served.Load()+refusals.Load() {
		t.Errorf("%d records, want %d", len(recs), served.Load()+refusals.Load())
	}
	bal := storagetest.CheckBalance(t, ctx, d.app.store, u.ID, start, spent)
	// The balance only falls, so the final one is the lowest it was.
	if bound := -int64(senders) * maxInputCost; bal < bound {
		t.Fatalf("balance %d below the bound %d (%d senders, each request's input at most %d)", bal, bound, senders, maxInputCost)
	}
	t.Logf("%d served, %d refused; spent %d of %d, balance %d (bound %d)", served.Load(), refusals.Load(), spent, start, bal, -int64(senders)*maxInputCost)
}
