package mock

import (
	"bufio"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestConcurrencyCounters(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			// A second of latency: ten local requests overlap even on a
			// loaded machine (at 100 ms some arrived after others ended).
			acc := Account{Name: "busy-1", Kind: KindOpenAI, Token: "sk-busy-000001", Latency: time.Second}
			f, base := startFleet(t, acc)
			c := newClient(t)
			body := chatBody
			if stream {
				body = `{"model":"gpt-5.4","stream":true}`
			}
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					resp, b := do(t, c, "POST", base+"/v1/chat/completions", acc.Token, body)
					if resp.StatusCode != 200 {
						t.Errorf("status %d: %s", resp.StatusCode, b)
					}
				})
			}
			wg.Wait()
			// Counted as ended before its last bytes left: no wait.
			st := f.Stats(acc.Name)
			want := AccountStats{InFlight: 0, MaxInFlight: 10, Requests: 10, Completed: 10}
			if st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
			if tot := f.TotalStats(); tot != want {
				t.Errorf("total %+v, want %+v", tot, want)
			}
			f.ResetStats()
			if st := f.Stats(acc.Name); st != (AccountStats{}) {
				t.Errorf("after reset %+v", st)
			}
		})
	}
}

func TestClientDisconnectMidStream(t *testing.T) {
	acc := Account{Name: "slow-1", Kind: KindOpenAI, Token: "sk-slow-000001", TokensPerSecond: 50, OutputTokens: 500}
	f, base := startFleet(t, acc)
	c := newClient(t)
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-5.4","stream":true}`))
	req.Header.Set("Authorization", "Bearer "+acc.Token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if strings.Contains(line, `"content":"Hello `) {
			break
		}
	}
	if st := f.Stats(acc.Name); st.InFlight != 1 {
		t.Errorf("mid-stream stats %+v", st)
	}
	resp.Body.Close() // unread body: the transport closes the connection
	waitFor(t, "the stream to be cancelled", func() bool { return f.Stats(acc.Name).InFlight == 0 })
	want := AccountStats{MaxInFlight: 1, Requests: 1, Cancelled: 1}
	if st := f.Stats(acc.Name); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestTiming(t *testing.T) {
	// Lower bounds only: Latency before the first content, pacing after it.
	acc := Account{Name: "timed-1", Kind: KindOpenAI, Token: "sk-timed-000001", Latency: 150 * time.Millisecond, TokensPerSecond: 100, OutputTokens: 10}
	_, base := startFleet(t, acc)
	c := newClient(t)
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		body := `{"model":"gpt-5.4","messages":[{"role":"user","content":"hi"}],"stream":true}`
		if path == "/v1/responses" {
			body = `{"model":"gpt-5.4","input":"hi","stream":true}`
		}
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acc.Token)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		var first, last time.Duration
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if strings.Contains(line, `"content":"Hello `) || strings.Contains(line, `"delta":"Hello `) {
				first = time.Since(start)
			}
			last = time.Since(start)
		}
		resp.Body.Close()
		if first < acc.Latency {
			t.Errorf("%s: first token after %v, want >= %v", path, first, acc.Latency)
		}
		if min := acc.Latency + 9*10*time.Millisecond; last < min {
			t.Errorf("%s: stream took %v, want >= %v", path, last, min)
		}
	}
	start := time.Now()
	resp, _ := do(t, c, "POST", base+"/v1/chat/completions", acc.Token, chatBody)
	if d, min := time.Since(start), acc.Latency+10*10*time.Millisecond; resp.StatusCode != 200 || d < min {
		t.Errorf("non-stream: status %d after %v, want 200 after >= %v", resp.StatusCode, d, min)
	}
}

// A stream's headers come before its first-token latency: with a latency
// of an hour, they can only have come first (the client gives up after
// 30 s).
func TestHeadersBeforeLatency(t *testing.T) {
	acc := Account{Name: "ttft-1", Kind: KindOpenAI, Token: "sk-ttft-000001", Latency: time.Hour, OutputTokens: 1}
	_, base := startFleet(t, acc)
	c := newClient(t)
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-5.4","stream":true}`))
	req.Header.Set("Authorization", "Bearer "+acc.Token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("headers did not come before the latency: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("headers: status %d, want 200", resp.StatusCode)
	}
}

func TestCloseStopsLongWaits(t *testing.T) {
	acc := Account{Name: "stuck-1", Kind: KindOpenAI, Token: "sk-stuck-000001", Latency: time.Hour}
	f := New(Config{Accounts: []Account{acc}})
	addr, err := f.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i, body := range []string{`{"model":"gpt-5.4","stream":true}`, chatBody} {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+acc.Token)
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			statuses[i] = resp.StatusCode
			readAll(t, resp)
			resp.Body.Close()
		})
	}
	waitFor(t, "both requests in flight", func() bool { return f.Stats(acc.Name).InFlight == 2 })
	done := make(chan error, 1)
	go func() { done <- f.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Close did not return while answers were waiting out an hour of latency")
	}
	wg.Wait()
	if statuses[0] != 200 || statuses[1] != 503 {
		t.Errorf("statuses %v, want [200 503] (stream already started; JSON refused)", statuses)
	}
	want := AccountStats{MaxInFlight: 2, Requests: 2, Cancelled: 2}
	if st := f.Stats(acc.Name); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Start("127.0.0.1:0"); err == nil {
		t.Errorf("Start after Close succeeded")
	}
}

func TestAddRemoveWhileServing(t *testing.T) {
	a := Account{Name: "a-1", Kind: KindOpenAI, Token: "sk-a-000001"}
	f, base := startFleet(t, a)
	c := newClient(t)
	b := Account{Name: "b-1", Kind: KindOpenAI, Token: "sk-b-000001", OutputTokens: 3}
	f.Add(b)
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", b.Token, chatBody)
	if resp.StatusCode != 200 || get(obj(t, string(body)), "choices", 0, "message", "content") != AnswerText(b.Name, 3) {
		t.Fatalf("added account: %d %s", resp.StatusCode, body)
	}
	f.Remove(b.Name)
	if resp, _ := do(t, c, "POST", base+"/v1/chat/completions", b.Token, chatBody); resp.StatusCode != 401 {
		t.Errorf("removed account: status %d, want 401", resp.StatusCode)
	}
	if st := f.Stats(b.Name); st != (AccountStats{}) {
		t.Errorf("removed account stats %+v", st)
	}
	// Replacing by name with a new token retires the old token.
	f.Add(Account{Name: a.Name, Kind: KindOpenAI, Token: "sk-a-000002"})
	if resp, _ := do(t, c, "POST", base+"/v1/chat/completions", a.Token, chatBody); resp.StatusCode != 401 {
		t.Errorf("old token after replace: status %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, c, "POST", base+"/v1/chat/completions", "sk-a-000002", chatBody); resp.StatusCode != 200 {
		t.Errorf("new token after replace: status %d, want 200", resp.StatusCode)
	}
	if tot := f.TotalStats(); tot.Completed != 2 || tot.Requests != 2 {
		t.Errorf("total %+v (removed accounts stay in the total)", tot)
	}
	// Concurrent Add/Remove under traffic (for -race).
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 50 {
			n := Account{Name: "churn", Kind: KindOpenAI, Token: "sk-churn-00000" + string(rune('a'+i%26))}
			f.Add(n)
			f.Remove(n.Name)
		}
	})
	for range 20 {
		do(t, c, "POST", base+"/v1/chat/completions", "sk-a-000002", chatBody)
	}
	wg.Wait()
}
