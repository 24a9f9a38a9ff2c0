package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// TestConcurrencyLimits sends 400 concurrent requests (half JSON, half
// streams) over 20 openai accounts allowing 2 in flight each, with upstream
// answers slow enough to overlap. Every request must succeed, no account may
// ever see more than 2 answers at once, and afterwards every account must be
// idle in the mock and in the gateway.
func TestConcurrencyLimits(t *testing.T) {
	const (
		requests = 400
		limit    = 2
		tokens   = 12
	)
	d := startTestDemo(t, nil, tuned(span(2, 40, 2), func(ma *mock.Account, sa *storage.Account) {
		ma.Latency, ma.TokensPerSecond = 50*time.Millisecond, 0
		sa.MaxConcurrency = limit
	}))
	if len(d.names) != 20 {
		t.Fatalf("%d accounts, want 20", len(d.names))
	}

	tr := &http.Transport{MaxIdleConnsPerHost: requests, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		served   = map[string]int{}
	)
	start := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-start
			stream := i%2 == 1
			name, err := concurrentRequest(client, d, stream, tokens)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("request %d (stream %v): %v", i, stream, err))
				return
			}
			served[name]++
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("400 requests did not finish within 90s")
	}

	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed; first ones:\n%s", len(failures), requests, strings.Join(failures[:min(10, len(failures))], "\n"))
	}
	total := 0
	for _, n := range served {
		total += n
	}
	if total != requests-len(failures) {
		t.Errorf("served %d, want %d", total, requests-len(failures))
	}

	var upstreamRequests, peak int64
	for _, name := range d.names {
		st := d.fleet.Stats(name)
		upstreamRequests += st.Requests
		peak = max(peak, st.MaxInFlight)
		if st.MaxInFlight > limit {
			t.Errorf("%s: mock saw %d answers in flight at once, limit %d", name, st.MaxInFlight, limit)
		}
		if st.Rejected != 0 || st.Cancelled != 0 {
			t.Errorf("%s: mock stats %+v, want no rejected or cancelled answers", name, st)
		}
	}
	if peak < limit {
		t.Errorf("no account ever had %d answers in flight: the requests did not overlap, the test proves nothing", limit)
	}
	if upstreamRequests != requests {
		t.Errorf("upstream saw %d requests, want %d (no failovers expected)", upstreamRequests, requests)
	}
	d.assertNoLeases(t)
	for _, v := range d.app.sys.Views() {
		if v.MaxInFlight != limit {
			t.Errorf("%s: gateway limit %d, want %d", v.Name, v.MaxInFlight, limit)
		}
	}
	t.Logf("served per account: %v", served)
}

// concurrentRequest sends one chat completion (JSON or stream) and returns the
// name of the account that answered. It runs off the test goroutine: errors
// are returned, not reported.
func concurrentRequest(client *http.Client, d *testDemo, stream bool, tokens int) (string, error) {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"stream":%v}`, demoOpenAIModel, stream)
	req, err := http.NewRequest(http.MethodPost, d.base+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+d.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	var text string
	if stream {
		text, err = chatStreamText(b)
	} else {
		text, err = chatJSONText(b)
	}
	if err != nil {
		return "", err
	}
	m := answerFrom.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("answer %q names no account", text)
	}
	if want := mock.AnswerText(m[1], tokens); text != want {
		return "", fmt.Errorf("answer %q, want %q", text, want)
	}
	return m[1], nil
}

// chatJSONText returns the message content of a chat completion.
func chatJSONText(b []byte) (string, error) {
	var r struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", err
	}
	if len(r.Choices) != 1 {
		return "", fmt.Errorf("%d choices", len(r.Choices))
	}
	return r.Choices[0].Message.Content, nil
}

// chatStreamText concatenates the content deltas of an SSE chat stream and
// checks that it ends with [DONE].
func chatStreamText(b []byte) (string, error) {
	var text strings.Builder
	done := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return "", fmt.Errorf("chunk %q: %w", line, err)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if !done {
		return "", fmt.Errorf("stream did not end with [DONE]: %.300s", b)
	}
	return text.String(), nil
}
