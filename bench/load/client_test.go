package load

import (
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/bench/scenario"
)

// startFleet serves a mock fleet with an account ok (20 ms to first token)
// and one that always answers 429, on 127.0.0.1.
func startFleet(t *testing.T) string {
	t.Helper()
	f := mock.New(mock.Config{Accounts: []mock.Account{
		{Name: "ok", Token: "tok-ok", Latency: 20 * time.Millisecond, OutputTokens: 5},
		{Name: "limited", Token: "tok-429", Fault: &mock.Fault{Kind: mock.FaultRateLimitRetryAfter}},
		{Name: "cut", Token: "tok-cut", Fault: &mock.Fault{Kind: mock.FaultDisconnectAfterContent}},
	}})
	addr, err := f.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return "http://" + addr + "/v1"
}

func TestClientMeasuresEveryAPI(t *testing.T) {
	base := startFleet(t)
	c, err := NewClient(Target{Name: "direct", BaseURL: base, Keys: []string{"tok-ok"}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range []scenario.API{scenario.Chat, scenario.Responses} {
		for _, stream := range []bool{false, true} {
			res := c.Do(Call{API: api, Stream: stream, Model: "gpt-5.4", Timeout: 5 * time.Second}, time.Now())
			if res.Err != "" || res.Status != 200 {
				t.Fatalf("%s stream=%v: %+v", api, stream, res)
			}
			if res.TTFT < 20*time.Millisecond || res.Latency < res.TTFT {
				t.Errorf("%s stream=%v: TTFT %v, latency %v; want TTFT ≥ the mock's 20 ms and ≤ latency", api, stream, res.TTFT, res.Latency)
			}
			if res.Service <= 0 || res.Service > res.Latency {
				t.Errorf("%s stream=%v: service time %v, latency %v", api, stream, res.Service, res.Latency)
			}
		}
	}
}

func TestClientClassifiesFailures(t *testing.T) {
	base := startFleet(t)
	for _, c := range []struct {
		key    string
		stream bool
		want   string
	}{
		{"tok-429", false, "status_429"},
		{"tok-429", true, "status_429"},
		{"tok-cut", true, "io"},
		{"no-such-token", false, "status_401"},
	} {
		cl, err := NewClient(Target{Name: "direct", BaseURL: base, Keys: []string{c.key}}, 2)
		if err != nil {
			t.Fatal(err)
		}
		res := cl.Do(Call{API: scenario.Chat, Stream: c.stream, Model: "gpt-5.4", Timeout: 5 * time.Second}, time.Now())
		if res.Err != c.want {
			t.Errorf("%s stream=%v: error %q, want %q (%+v)", c.key, c.stream, res.Err, c.want, res)
		}
	}
	cl, _ := NewClient(Target{Name: "gone", BaseURL: "http://127.0.0.1:1/v1", Keys: []string{"k"}}, 1)
	if res := cl.Do(Call{API: scenario.Chat, Model: "m", Timeout: time.Second}, time.Now()); res.Err != "connect" {
		t.Errorf("closed port: %+v, want connect", res)
	}
}

func TestClientUsesKeysInTurn(t *testing.T) {
	if _, err := NewClient(Target{BaseURL: "ftp://x"}, 1); err == nil {
		t.Fatal("ftp base URL accepted")
	}
	if _, err := NewClient(Target{BaseURL: "http://127.0.0.1:1/v1"}, 1); err == nil {
		t.Fatal("target without keys accepted")
	}
	base := startFleet(t)
	c, _ := NewClient(Target{BaseURL: base, Keys: []string{"tok-ok", "tok-429"}}, 2)
	var got []string
	for range 4 {
		got = append(got, c.Do(Call{API: scenario.Chat, Model: "gpt-5.4", Timeout: 5 * time.Second}, time.Now()).Err)
	}
	if got[0] != "" || got[1] != "status_429" || got[2] != "" || got[3] != "status_429" {
		t.Fatalf("errors in turn: %q", got)
	}
}

func TestWSClient(t *testing.T) {
	base := startFleet(t)
	c, err := NewWSClient(Target{Name: "direct", BaseURL: base, Keys: []string{"tok-ok"}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 { // the second and third reuse the connection
		start := time.Now().Add(-time.Millisecond) // as if sent a millisecond late
		res := c.Do(Call{API: scenario.ResponsesWS, Model: "gpt-5.4", Timeout: 5 * time.Second}, start)
		if res.Latency-res.Service < time.Millisecond {
			t.Fatalf("request %d: latency %v, service %v: the lateness is not in the latency", i, res.Latency, res.Service)
		}
		if res.Err != "" || res.TTFT < 20*time.Millisecond || res.Latency < res.TTFT {
			t.Fatalf("request %d: %+v", i, res)
		}
	}
	bad, _ := NewWSClient(Target{Name: "direct", BaseURL: base, Keys: []string{"tok-429"}}, 1)
	defer bad.Close()
	if res := bad.Do(Call{API: scenario.ResponsesWS, Model: "gpt-5.4", Timeout: 5 * time.Second}, time.Now()); res.Err != "ws_error" {
		t.Fatalf("429 account over WebSocket: %+v, want ws_error", res)
	}
	none, _ := NewWSClient(Target{Name: "direct", BaseURL: base, Keys: []string{"nobody"}}, 1)
	if res := none.Do(Call{API: scenario.ResponsesWS, Model: "gpt-5.4", Timeout: 5 * time.Second}, time.Now()); res.Err != "ws_upgrade_401" {
		t.Fatalf("unknown token: %+v, want ws_upgrade_401", res)
	}
}
