package actors

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/codexmock"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

func TestUsageWindowsForecastAndQuotaCooldown(t *testing.T) {
	s, _ := startSystem(t, 1, 4)
	const id = "id-0000"
	now := time.Now().Truncate(time.Second)
	reset := now.Add(2 * time.Hour)
	win := func(used float64, resets time.Time) upstream.RateLimits {
		return upstream.RateLimits{Plan: "pro", Windows: []upstream.RateWindow{{Name: "5h", UsedPercent: used, WindowMinutes: 300, ResetsAt: resets}}}
	}
	view := func() View { v, _ := s.View(id); return v }
	s.ReportRateLimits(id, "", win(10, reset), now)
	// 30 minutes later 40 % used: 60 %/h, so 100 % in one more hour, before the reset.
	s.ReportRateLimits(id, "", win(40, reset), now.Add(30*time.Minute))
	waitFor(t, func() bool { v := view(); return len(v.Windows) == 1 && v.Windows[0].UsedPercent == 40 })
	w := view().Windows[0]
	if w.BurnRate != 60 || !w.ExhaustsAt.Equal(now.Add(90*time.Minute)) || view().Plan != "pro" {
		t.Fatalf("forecast: %+v plan %q", w, view().Plan)
	}
	// A slower rate that would not run out before the reset: no forecast.
	s.ReportRateLimits(id, "", win(41, reset), now.Add(60*time.Minute))
	waitFor(t, func() bool { return view().Windows[0].UsedPercent == 41 })
	if w := view().Windows[0]; !w.ExhaustsAt.IsZero() || w.BurnRate <= 0 {
		t.Fatalf("slow window: %+v", w)
	}

	// Used up: the account cools until the window resets.
	s.ReportRateLimits(id, "", win(100, reset), now.Add(61*time.Minute))
	waitFor(t, func() bool { return view().Status == StatusCooling })
	v := view()
	if v.CooldownReason != "quota" || !v.CooldownUntil.Equal(reset) || !v.Windows[0].ExhaustsAt.Equal(now.Add(61*time.Minute)) {
		t.Fatalf("exhausted: %v until %v (want %v) %+v", v.CooldownReason, v.CooldownUntil, reset, v.Windows)
	}
	// A late answer from before the limit (same window, under 100 %) is not evidence of a reset.
	s.ReportRateLimits(id, "", win(95, reset), now.Add(62*time.Minute))
	waitFor(t, func() bool { return view().Windows[0].UsedPercent == 95 })
	if view().Status != StatusCooling {
		t.Fatal("a stale report ended the quota cooldown")
	}
	// The upstream shows a new window: the cooldown ends early.
	s.ReportRateLimits(id, "", win(0, now.Add(7*time.Hour)), now.Add(63*time.Minute))
	waitFor(t, func() bool { return view().Status == StatusActive })
	if v := view(); !v.CooldownUntil.IsZero() || v.Windows[0].UsedPercent != 0 {
		t.Fatalf("after reset: %+v", v)
	}
}

func TestSniffRateLimitsEvent(t *testing.T) {
	ev := `{"type":"codex.rate_limits","plan_type":"plus","rate_limits":{"primary":{"used_percent":42,"window_minutes":60,"reset_at":1700000000}}}`
	stream := "event: codex.rate_limits\ndata: " + ev + "\n\nevent: response.created\ndata: {}\n\n"
	for _, chunk := range []int{1, 7, 64, len(stream)} {
		var got []upstream.RateLimits
		b := &sniffBody{ReadCloser: io.NopCloser(&chunker{s: stream, n: chunk}), report: func(l upstream.RateLimits, _ time.Time) { got = append(got, l) }}
		out, err := io.ReadAll(b)
		if err != nil || string(out) != stream {
			t.Fatalf("chunk %d: the stream changed: %v", chunk, err)
		}
		if len(got) != 1 || got[0].Plan != "plus" || got[0].Windows[0].UsedPercent != 42 {
			t.Fatalf("chunk %d: %+v", chunk, got)
		}
	}
}

type chunker struct {
	s string
	n int
}

func (c *chunker) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

func TestRateLimitHeadersReachTheLuaView(t *testing.T) {
	// A real answer of the mock backend: its x-codex-* headers go through the
	// account actor into the view a Lua policy scores.
	e := startCodex(t, codexmock.Config{}, []string{"acc-1"},
		func(m *codexmock.Server, id string) string { a, _ := m.IssueAccess(id, time.Hour); return a }, time.Minute)
	e.mock.SetUsed("acc-1", 37.5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := e.call(ctx); st != 200 || err != nil {
		t.Fatalf("%d %v", st, err)
	}
	waitFor(t, func() bool { v, _ := e.sys.View("t-acc-1"); return len(v.Windows) == 1 })
	v, _ := e.sys.View("t-acc-1")
	p, err := scripts.Compile("probe", `function score(a, now)
  local w = a.usage_windows[1]
  if a.plan ~= "plus" or w.name ~= "5h" or w.window_minutes ~= 300 or w.resets_at == nil then return nil end
  return w.used_percent
end`, scripts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var av scripts.AccountView
	FillAccountView(&av, &v)
	score, ok, _, _, err := p.Score(&av, time.Now())
	if err != nil || !ok || score != 37.5 {
		t.Fatalf("lua saw score %v ok %v err %v (view %+v)", score, ok, err, v.Windows)
	}
}

func TestLimitsTransportOnlyWrapsCodex(t *testing.T) {
	a := &account{cfg: &accountConfig{account: storage.Account{Provider: storage.ProviderOpenAI}}}
	a.setTransport(nopTransport{})
	if _, ok := a.transport.(*limitsTransport); ok {
		t.Fatal("openai transport wrapped")
	}
	lt := &limitsTransport{Transport: headerTransport{}, report: func(upstream.RateLimits, time.Time, string) { t.Fatal("reported without headers") }}
	resp, err := lt.Do(context.Background(), &upstream.Request{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !bytes.Equal(b, []byte("data: {}\n\n")) {
		t.Fatalf("%q", b)
	}
}

type headerTransport struct{}

func (headerTransport) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	return &upstream.Response{Status: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("data: {}\n\n"))}, nil
}

func TestLimitsTransportKeepsWebSocket(t *testing.T) {
	m, err := codexmock.Start(codexmock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tr, err := upstream.New(storage.Account{Name: "x", Provider: storage.ProviderCodex, BaseURL: m.BaseURL(),
		Credentials: storage.Credentials{AccessToken: "t"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := &account{cfg: &accountConfig{account: storage.Account{Provider: storage.ProviderCodex}}}
	a.setTransport(tr)
	if _, ok := a.transport.(upstream.WebSocketDialer); !ok || !upstream.SupportsWebSocket(a.transport) {
		t.Fatal("the wrapper hides the WebSocket capability")
	}
}

// The quota probe of every provider asks nothing its upstream refuses: a
// codex account's probe carries only members the Codex backend takes (it
// refuses max_output_tokens), the others a Chat request for one token.
func TestProbeRequestPerProvider(t *testing.T) {
	for _, p := range []storage.Provider{storage.ProviderCodex, storage.ProviderOpenAI, storage.ProviderOpenAICompat, storage.ProviderAnthropic} {
		req := probeRequest(p, "m")
		if p == storage.ProviderAnthropic {
			if req != nil {
				t.Errorf("%s: a probe %s; anthropic speaks neither Chat nor Responses", p, req.Body)
			}
			continue
		}
		if req == nil || !upstream.Supports(p, req.Endpoint) || !gjson.ValidBytes(req.Body) {
			t.Fatalf("%s: probe %+v", p, req)
		}
		if p != storage.ProviderCodex {
			continue
		}
		gjson.ParseBytes(req.Body).ForEach(func(k, _ gjson.Result) bool {
			if !upstream.CodexAccepts(k.Str) {
				t.Errorf("codex probe sends %q, which the Codex backend refuses: %s", k.Str, req.Body)
			}
			return true
		})
	}
}
