package main

// Fault tests of issue 6: failover before commit over a pool where 30 % of
// the accounts fail before the first content, the state every failed account
// is left in, usage accounting, a break after commit as the official SDK sees
// it, the transient backoff schedule, and a failover latency benchmark.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	_ "modernc.org/sqlite" // the usage table is read back with SQL
)

// Fault suite parameters.
const (
	faultSuiteRequests    = 10000
	faultSuiteAccounts    = 1000
	faultSuiteFraction    = 0.3
	faultSuiteConcurrency = 16
	faultSuiteTokens      = 12 // demoAccount's OutputTokens
	faultSuiteSeed        = 6

	suiteFirstToken = 300 * time.Millisecond
	suiteNonStream  = time.Second
	suiteHeartbeat  = 100 * time.Millisecond
	suiteAttempts   = 6

	quotaResetsIn  = 20 * time.Minute // rate_limit_reset: the mock's quota comes back after this
	rateRetryAfter = 90 * time.Second // rate_limit_retry_after: the Retry-After the 429 carries
	quotaDefault   = time.Hour        // the cooldown of a quota failure with no reset time
	transientBase  = 30 * time.Second
	transientMax   = 10 * time.Minute
	durationSlack  = 2 * time.Second
	slowFaultDelay = 2 * time.Minute // slow_first_token: far beyond both gateway timeouts
	suiteStall     = time.Minute     // no request started for this long: the suite hangs
)

// suiteRoute is one of the request shapes the suite sends.
type suiteRoute struct {
	name      string
	path      string // under /v1
	model     string
	stream    bool
	responses bool
	parity    int // 1: codex accounts serve it, 0: openai accounts
}

var suiteRoutes = []suiteRoute{
	{"chat", "/chat/completions", demoOpenAIModel, false, false, 0},
	{"chat_stream", "/chat/completions", demoOpenAIModel, true, false, 0},
	{"responses_codex", "/responses", demoCodexModel, false, true, 1},
	{"responses_codex_stream", "/responses", demoCodexModel, true, true, 1},
	{"responses_openai", "/responses", demoOpenAIModel, false, true, 0},
	{"responses_openai_stream", "/responses", demoOpenAIModel, true, true, 0},
}

func (r suiteRoute) body() string {
	if r.responses {
		return fmt.Sprintf(`{"model":%q,"input":"hi","stream":%v}`, r.model, r.stream)
	}
	if r.stream {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, r.model)
	}
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, r.model)
}

// faultyPool returns n demo accounts of the two kinds the suite's routes
// reach (fast: 2 ms to first token, no pacing) with fraction of them failing
// in the pre-content mix, and records each faulted account's fault in
// faults. armed is set to the time the
// faults are armed (just before the fleet adds the accounts).
func faultyPool(n int, fraction float64, mix []mock.FaultKind, seed int64, faults map[string]mock.Fault, armed *time.Time) accountsFunc {
	return func(mockAddr string) ([]mock.Account, []storage.Account) {
		fa, pa := twoKindAccounts(n, mockAddr)
		for i := range fa {
			fa[i].Latency, fa[i].TokensPerSecond = 2*time.Millisecond, 0
		}
		mock.AssignFaults(fa, fraction, mix, seed)
		for i := range fa {
			f := fa[i].Fault
			if f == nil {
				continue
			}
			switch f.Kind {
			case mock.FaultSlowFirstToken:
				f.Delay = slowFaultDelay
			case mock.FaultRateLimitReset:
				f.ResetsIn = quotaResetsIn
			case mock.FaultRateLimitRetryAfter:
				f.RetryAfter = rateRetryAfter
			}
			faults[fa[i].Name] = *f
		}
		*armed = time.Now()
		return fa, pa
	}
}

// suiteConfig is the gateway configuration of the fault tests: short waits
// for a first token and a non-stream answer, small heartbeats, room to fail
// over, and the least_inflight policy, which spreads requests over the whole
// pool (least recently granted first) so that every faulted account is met.
// (Under the default policy, smart, an account that failed drops a score
// band and rests while better ones are free: a pool where 30 % fail would
// then exercise failover less.)
func suiteConfig(cfg *Config) *Config {
	cfg.Policies.Active = "least_inflight"
	cfg.Gateway.FirstTokenTimeout = suiteFirstToken
	cfg.Gateway.NonStreamTimeout = suiteNonStream
	cfg.Gateway.HeartbeatInterval = suiteHeartbeat
	cfg.Gateway.MaxAttempts = suiteAttempts
	cfg.Gateway.FailoverBudget = 10 * time.Second
	// Quota probes off: the suite matches the mock's requests to the
	// gateway's leases one for one, and a probe is an upstream request
	// without a lease (a run slower than the probe interval would see it).
	// e2e_probe_test.go covers probes.
	cfg.Gateway.QuotaProbe = 0
	cfg.Log.Level = "error"
	return cfg
}

// suiteResult is what one client request of the suite ended with.
type suiteResult struct {
	route     string
	requestID string // X-Request-Id
	name      string // serving account, on success
	err       error
	status    int  // HTTP status
	corrupt   bool // a 200 whose body is not one clean answer (other than a stream that failed before any content)
	heartbeat int  // SSE comments the client received
}

// errStreamFailed marks a stream that ended with its protocol's error before
// any content: every attempt failed after the head was committed (a normal
// failure, not a corrupt answer).
var errStreamFailed = errors.New("stream failed before content")

// TestFaultSuite: 30 % of 1,000 demo accounts fail in the pre-content mix;
// many concurrent clients (chat and responses, JSON and streams) must
// succeed at least 99.9 % of the time, each answer byte for byte the
// script of the one account named in it; every failed account must be left
// in the state its failure class calls for; usage rows must equal the
// successful requests exactly.
func TestFaultSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite: skipped with -short")
	}
	started := time.Now()
	faults := map[string]mock.Fault{}
	var armed time.Time
	cfg := suiteConfig(testConfig(t))
	cfg.Log.Level = "info" // "upstream attempt failed" lines: the attempts of a request that failed
	d := startTestDemo(t, cfg, faultyPool(faultSuiteAccounts, faultSuiteFraction, mock.PreContentMix(), faultSuiteSeed, faults, &armed))
	added := time.Now()
	if len(faults) != int(faultSuiteFraction*faultSuiteAccounts) {
		t.Fatalf("%d faulted accounts, want %d", len(faults), int(faultSuiteFraction*faultSuiteAccounts))
	}
	byKind := map[mock.FaultKind]int{}
	for _, f := range faults {
		byKind[f.Kind]++
	}
	t.Logf("%d accounts, %d faulted: %v (setup %v)", len(d.names), len(faults), byKind, time.Since(started).Round(time.Millisecond))

	results := runSuite(t, d, faultSuiteRequests, faultSuiteConcurrency, faults)
	elapsed := time.Since(started)

	// 1. At least 99.9 % succeed; every success is exactly one healthy account's script.
	var ok, failed, heartbeats int
	var failures []string
	byRoute := map[string][2]int{}
	for _, r := range results {
		c := byRoute[r.route]
		heartbeats += r.heartbeat
		if r.err != nil {
			failed++
			c[1]++
			failures = append(failures, fmt.Sprintf("%s %s: %v", r.route, r.requestID, r.err))
		} else {
			ok++
			c[0]++
		}
		byRoute[r.route] = c
	}
	t.Logf("%d requests in %v: %d ok, %d failed; by route (ok, failed): %v; %d heartbeats seen by clients",
		len(results), elapsed.Round(time.Millisecond), ok, failed, byRoute, heartbeats)
	if need := (len(results)*999 + 999) / 1000; ok < need {
		t.Errorf("%d of %d requests succeeded, want at least %d (99.9 %%)", ok, len(results), need)
	}
	if len(failures) > 0 {
		sort.Strings(failures)
		t.Logf("failed requests (%d):\n%s", len(failures), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
	for _, r := range results {
		if r.corrupt {
			t.Errorf("corrupt answer (%s %s): %v", r.route, r.requestID, r.err)
		}
	}

	d.assertNoLeases(t)

	// 2. Every account's state in the gateway agrees with its fault and with the mock's counters.
	views := map[string]actors.View{}
	for _, v := range d.app.sys.Views() {
		views[v.Name] = v
	}
	// A healthy account may still fail an attempt when the machine is so
	// busy that its answer misses the gateway's short first-token or
	// non-stream wait: that is a timeout (transient), counted and logged,
	// never a fault of the mock.
	var disagree []string
	var slowHealthy []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for _, v := range d.app.sys.Views() {
			views[v.Name] = v
		}
		disagree, slowHealthy = disagree[:0], slowHealthy[:0]
		for _, name := range d.names {
			v, st := views[name], d.fleet.Stats(name)
			_, faulted := faults[name]
			switch {
			case uint64(st.Requests) != v.Requests:
				disagree = append(disagree, fmt.Sprintf("%s: mock saw %d requests, gateway granted %d leases", name, st.Requests, v.Requests))
			case faulted && uint64(st.Faults) != v.Failures:
				disagree = append(disagree, fmt.Sprintf("%s (%s): mock fired %d faults, gateway counted %d failures", name, faults[name].Kind, st.Faults, v.Failures))
			case !faulted && (st.Faults != 0 || v.Successes+v.Failures != v.Requests || v.Successes > uint64(st.Completed)):
				disagree = append(disagree, fmt.Sprintf("%s (healthy): gateway %d ok / %d failed of %d, mock %d completed / %d cancelled / %d faults",
					name, v.Successes, v.Failures, v.Requests, st.Completed, st.Cancelled, st.Faults))
			case !faulted && v.Failures > 0:
				var classes []string
				for c := range upstream.NumClasses {
					if !v.FailedAt(upstream.Class(c)).IsZero() {
						classes = append(classes, upstream.Class(c).String())
					}
				}
				if !slices.Equal(classes, []string{"transient"}) {
					disagree = append(disagree, fmt.Sprintf("%s (healthy): failures of classes %v", name, classes))
				}
				slowHealthy = append(slowHealthy, fmt.Sprintf("%s %d/%d", name, v.Failures, v.Requests))
			}
		}
		if len(disagree) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(disagree) > 0 {
		sort.Strings(disagree)
		t.Errorf("gateway and mock disagree on %d accounts: %s", len(disagree), strings.Join(disagree[:min(len(disagree), 10)], "; "))
	}
	if len(slowHealthy) > 0 {
		t.Logf("healthy accounts with timed-out attempts (machine busy), failed/requests: %v", slowHealthy)
	}
	now := time.Now()
	tried := map[mock.FaultKind]int{}
	states := map[string]int{}
	for name, f := range faults {
		v := views[name]
		if v.Failures > 0 {
			tried[f.Kind]++
		}
		states[string(f.Kind)+"→"+v.Status.String()+"/"+v.CooldownReason]++
		if err := checkFaultState(name, f, v, now, armed, added); err != nil {
			t.Error(err)
		}
	}
	t.Logf("faulted accounts tried at least once, by kind: %v", tried)
	t.Logf("faulted accounts' final states: %v", states)
	if n := len(faults) - sumValues(tried); n > len(faults)/20 {
		t.Errorf("%d faulted accounts were never tried: the suite did not exercise the pool", n)
	}

	// 3. Usage rows equal the successful requests exactly, each billed to the account that served it.
	idByName := map[string]string{}
	for name, v := range views {
		idByName[name] = v.ID
	}
	// Failed client requests are in the request log too, one row each with a
	// status >= 400; the successful rows (status < 400) are the billed ones.
	want := map[string]suiteResult{}
	failedWant := map[string]suiteResult{}
	for _, r := range results {
		switch {
		case r.err == nil:
			want[r.requestID] = r
		case r.requestID != "":
			failedWant[r.requestID] = r
		}
	}
	rows := usageRows(t, d.demo, len(want)+len(failedWant))
	attempts := map[int]int{}
	for _, row := range rows {
		if row.status >= 400 {
			r, ok := failedWant[row.requestID]
			switch {
			case !ok:
				t.Errorf("failed usage row %s (account %s, status %d) is no failed client request", row.requestID, row.accountID, row.status)
			case r.status >= 400 && row.status != r.status:
				t.Errorf("failed usage row %s: status %d, the client got %d", row.requestID, row.status, r.status)
			case row.attempts > suiteAttempts:
				t.Errorf("failed usage row %s: %d attempts", row.requestID, row.attempts)
			}
			delete(failedWant, row.requestID)
			continue
		}
		attempts[row.attempts]++
		r, ok := want[row.requestID]
		switch {
		case !ok:
			t.Errorf("usage row %s (account %s, status %d) is no successful client request", row.requestID, row.accountID, row.status)
		case row.accountID != idByName[r.name]:
			t.Errorf("usage row %s billed to account %s, but %s (%s) served it", row.requestID, row.accountID, r.name, idByName[r.name])
		case row.status != 200 || row.attempts < 1 || row.attempts > suiteAttempts || row.errorClass != "":
			t.Errorf("usage row %s: status %d, attempts %d, error class %q", row.requestID, row.status, row.attempts, row.errorClass)
		}
		delete(want, row.requestID)
	}
	if len(want) > 0 {
		t.Errorf("%d successful requests have no usage row", len(want))
	}
	if len(failedWant) > 0 {
		t.Errorf("%d failed client requests have no usage row", len(failedWant))
	}
	if failed > 0 {
		// The failed requests' attempts, from the gateway log: requests that
		// failed over and have no usage row.
		billed := map[string]bool{}
		for _, row := range rows {
			billed[row.requestID] = row.status < 400
		}
		var lines []string
		for _, l := range strings.Split(d.logs.String(), "\n") {
			if m := logRequestID.FindStringSubmatch(l); m != nil && !billed[m[1]] {
				lines = append(lines, l)
			}
		}
		t.Logf("failovers of unbilled requests:\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("attempts per served request (from usage rows): %v", attempts)
	t.Logf("suite total %v", time.Since(started).Round(time.Millisecond))
}

var logRequestID = regexp.MustCompile(`request_id=(req_[0-9a-f]+)`)

func sumValues[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// runSuite sends requests client requests over conc goroutines, cycling
// through suiteRoutes, and checks each answer.
func runSuite(t *testing.T, d *testDemo, requests, conc int, faults map[string]mock.Fault) []suiteResult {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	results := make([]suiteResult, requests)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= requests {
					return
				}
				rt := suiteRoutes[i%len(suiteRoutes)]
				results[i] = suiteRequest(client, d, rt, faults)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// A hang is no request starting for suiteStall: a slow host (the suite
	// ran at 50 requests a second at load 30 under -race) only takes longer.
	tick := time.NewTicker(suiteStall / 4)
	defer tick.Stop()
	last, since := next.Load(), time.Now()
	for {
		select {
		case <-done:
			return results
		case now := <-tick.C:
			if n := next.Load(); n != last {
				last, since = n, now
			} else if now.Sub(since) >= suiteStall {
				t.Fatalf("%d requests: none started for %v (%d started)", requests, suiteStall, n)
			}
		}
	}
}

// suiteRequest sends one request and checks its answer. It runs off the test
// goroutine: problems are returned in the result.
func suiteRequest(client *http.Client, d *testDemo, rt suiteRoute, faults map[string]mock.Fault) (res suiteResult) {
	res.route = rt.name
	req, err := http.NewRequest(http.MethodPost, d.base+rt.path, strings.NewReader(rt.body()))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Authorization", "Bearer "+d.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.requestID = resp.Header.Get("X-Request-Id")
	res.status = resp.StatusCode
	defer func() { res.corrupt = res.status == 200 && res.err != nil && !errors.Is(res.err, errStreamFailed) }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		res.err = fmt.Errorf("read: %w", err)
		return res
	}
	if resp.StatusCode != 200 {
		res.err = fmt.Errorf("status %d: %.300s", resp.StatusCode, b)
		return res
	}
	var text string
	switch {
	case rt.stream && rt.responses:
		text, res.heartbeat, err = responsesStreamText(b)
	case rt.stream:
		text, res.heartbeat, err = strictChatStreamText(b)
	case rt.responses:
		text, err = responsesJSONText(b)
	default:
		text, err = strictChatJSONText(b)
	}
	if err != nil {
		res.err = err
		return res
	}
	res.name, res.err = checkScript(d, text, rt.parity, faults)
	return res
}

// answerName matches the account name at the start of a mock answer.
var answerName = regexp.MustCompile(`^Hello from (demo-\d{4})\.`)

// checkScript checks that text is byte for byte the answer script of the one
// account it names, a healthy account of the right kind, and returns its name.
func checkScript(d *testDemo, text string, parity int, faults map[string]mock.Fault) (string, error) {
	m := answerName.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("spliced or foreign answer %q names no account", text)
	}
	name := m[1]
	if want := mock.AnswerText(name, faultSuiteTokens); text != want {
		return name, fmt.Errorf("spliced or duplicated answer from %s:\n%q, want \"Hello…\n%q", name, text, want)
	}
	if !slices.Contains(d.names, name) {
		return name, fmt.Errorf("answer names %s, not an account of this demo", name)
	}
	var num int
	fmt.Sscanf(name, "demo-%d", &num)
	if num%2 != parity {
		return name, fmt.Errorf("served by %s, an account of the wrong kind", name)
	}
	if f, ok := faults[name]; ok {
		return name, fmt.Errorf("served by faulted account %s (%s)", name, f.Kind)
	}
	return name, nil
}

// sseEvent is one event of an SSE body.
type sseEvent struct {
	name string
	data string
}

// parseSSE splits an SSE body into events, counting comment lines. Every
// event must end with a blank line (the body must not be cut).
func parseSSE(b []byte) ([]sseEvent, int, error) {
	var evs []sseEvent
	comments := 0
	if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n\n")) {
		return nil, 0, fmt.Errorf("stream cut mid-event: %.200q", b[max(0, len(b)-200):])
	}
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		var ev sseEvent
		var data []string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments++
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case line == "":
			default:
				return nil, comments, fmt.Errorf("unexpected SSE line %q", line)
			}
		}
		if data == nil {
			if ev.name != "" {
				return nil, comments, fmt.Errorf("event %q without data", ev.name)
			}
			continue // comments only
		}
		ev.data = strings.Join(data, "\n")
		evs = append(evs, ev)
	}
	return evs, comments, nil
}

// strictChatStreamText checks a Chat stream (one completion id throughout,
// no error chunk, one finish_reason, one final [DONE]) and returns its text.
func strictChatStreamText(b []byte) (string, int, error) {
	evs, comments, err := parseSSE(b)
	if err != nil {
		return "", comments, err
	}
	if len(evs) > 0 && evs[len(evs)-1].data != "[DONE]" {
		// Failed before content: nothing but the error chunk (a held role
		// chunk is never sent without content).
		if _, err := parseOpenAIError([]byte(evs[len(evs)-1].data)); err == nil && len(evs) == 1 {
			return "", comments, fmt.Errorf("%w: %s", errStreamFailed, evs[0].data)
		}
	}
	if len(evs) < 2 || evs[len(evs)-1].data != "[DONE]" {
		return "", comments, fmt.Errorf("chat stream does not end with [DONE]: %.400s", b)
	}
	var text strings.Builder
	id, finishes := "", 0
	for i, ev := range evs[:len(evs)-1] {
		var ch struct {
			ID      string          `json:"id"`
			Object  string          `json:"object"`
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.data), &ch); err != nil {
			return "", comments, fmt.Errorf("chunk %d %q: %w", i, ev.data, err)
		}
		switch {
		case ch.Error != nil:
			return "", comments, fmt.Errorf("error chunk in a stream that ended with [DONE]: %s", ev.data)
		case ch.Object != "chat.completion.chunk":
			return "", comments, fmt.Errorf("chunk %d: object %q", i, ch.Object)
		case id == "":
			id = ch.ID
		case ch.ID != id:
			return "", comments, fmt.Errorf("spliced stream: chunk %d has id %q, earlier ones %q", i, ch.ID, id)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != nil {
				finishes++
			}
		}
	}
	if finishes != 1 {
		return "", comments, fmt.Errorf("%d finish_reason chunks, want 1", finishes)
	}
	return text.String(), comments, nil
}

// strictChatJSONText returns the content of a chat.completion.
func strictChatJSONText(b []byte) (string, error) {
	var r struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Content string } `json:"message"`
			FinishReason string                   `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("chat JSON: %w: %.300s", err, b)
	}
	if r.Object != "chat.completion" || len(r.Choices) != 1 || r.Choices[0].FinishReason != "stop" {
		return "", fmt.Errorf("chat JSON: object %q, %d choices: %.300s", r.Object, len(r.Choices), b)
	}
	return r.Choices[0].Message.Content, nil
}

// respObject is the part of a Responses response object the tests read.
type respObject struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

func (r *respObject) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			if c.Type == "output_text" {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// responsesJSONText returns the output text of a completed response object.
func responsesJSONText(b []byte) (string, error) {
	var r respObject
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("responses JSON: %w: %.300s", err, b)
	}
	if r.Object != "response" || r.Status != "completed" || r.ID == "" {
		return "", fmt.Errorf("responses JSON: object %q status %q id %q", r.Object, r.Status, r.ID)
	}
	return r.text(), nil
}

// responsesStreamText checks a Responses stream (event names match types,
// sequence numbers 0, 1, 2… without a gap or repeat, one response id
// throughout, created first and completed last, no error event, the deltas
// equal to the done text and the completed response's text) and returns the
// concatenated deltas.
func responsesStreamText(b []byte) (string, int, error) {
	evs, comments, err := parseSSE(b)
	if err != nil {
		return "", comments, err
	}
	if len(evs) == 0 {
		return "", comments, fmt.Errorf("responses stream without events: %.400s", b)
	}
	var deltas strings.Builder
	var respID, doneText string
	var completed *respObject
	for i, ev := range evs {
		var e struct {
			Type     string      `json:"type"`
			Seq      *int        `json:"sequence_number"`
			Delta    string      `json:"delta"`
			Text     string      `json:"text"`
			Response *respObject `json:"response"`
		}
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
			return "", comments, fmt.Errorf("event %d %q: %w", i, ev.data, err)
		}
		if e.Type != ev.name {
			return "", comments, fmt.Errorf("event %d: name %q, type %q", i, ev.name, e.Type)
		}
		if i == 0 && len(evs) == 2 && e.Type == "error" && evs[1].name == "response.failed" {
			// Failed before content: nothing but the error (held events of
			// failed attempts are never sent).
			return "", comments, fmt.Errorf("%w: %s", errStreamFailed, ev.data)
		}
		if e.Seq == nil || *e.Seq != i {
			return "", comments, fmt.Errorf("spliced or duplicated stream: event %d (%s) has sequence_number %v", i, e.Type, e.Seq)
		}
		if e.Response != nil {
			if respID == "" {
				respID = e.Response.ID
			} else if e.Response.ID != respID {
				return "", comments, fmt.Errorf("spliced stream: event %d (%s) of response %s, earlier ones of %s", i, e.Type, e.Response.ID, respID)
			}
		}
		switch e.Type {
		case "response.output_text.delta":
			deltas.WriteString(e.Delta)
		case "response.output_text.done":
			doneText = e.Text
		case "response.completed":
			completed = e.Response
		case "error", "response.failed", "response.incomplete":
			return "", comments, fmt.Errorf("%s event in the stream: %s", e.Type, ev.data)
		}
	}
	if evs[0].name != "response.created" || evs[len(evs)-1].name != "response.completed" || completed == nil {
		return "", comments, fmt.Errorf("responses stream from %s to %s", evs[0].name, evs[len(evs)-1].name)
	}
	if doneText != deltas.String() || completed.text() != deltas.String() {
		return "", comments, fmt.Errorf("deltas %q, done text %q, completed text %q", deltas.String(), doneText, completed.text())
	}
	return deltas.String(), comments, nil
}

// checkFaultState checks the gateway's view of a faulted account against
// its fault's failure class (docs/architecture.md, "Failure classes").
func checkFaultState(name string, f mock.Fault, v actors.View, now, armed, added time.Time) error {
	if v.Failures == 0 {
		if v.Status != actors.StatusActive {
			return fmt.Errorf("%s (%s, never failed): status %s", name, f.Kind, v.Status)
		}
		return nil
	}
	want := faultClass(f.Kind)
	for c := range upstream.NumClasses {
		if c != int(want) && !v.FailedAt(upstream.Class(c)).IsZero() {
			return fmt.Errorf("%s (%s): a %s failure recorded, want only %s", name, f.Kind, upstream.Class(c), want)
		}
	}
	last := v.FailedAt(want)
	if last.IsZero() {
		return fmt.Errorf("%s (%s): %d failures but none of class %s", name, f.Kind, v.Failures, want)
	}
	if v.Successes != 0 || v.FailureStreak != int(v.Failures) || v.EWMASuccess >= 1 {
		return fmt.Errorf("%s (%s): %d successes, streak %d of %d failures, EWMA success %.3f", name, f.Kind, v.Successes, v.FailureStreak, v.Failures, v.EWMASuccess)
	}
	until := v.CooldownUntil.Sub(last) // the cooldown the last failure set
	cooling := func(reason string, lo, hi time.Duration) error {
		if v.Status != actors.StatusCooling || v.CooldownReason != reason {
			return fmt.Errorf("%s (%s): status %s reason %q, want cooling for %s", name, f.Kind, v.Status, v.CooldownReason, reason)
		}
		if until < lo || until > hi {
			return fmt.Errorf("%s (%s): cooling %v after its last failure, want between %v and %v", name, f.Kind, until, lo, hi)
		}
		return nil
	}
	switch want {
	case upstream.ClassQuota:
		if v.Provider == storage.ProviderCodex {
			// resets_in_seconds counts down to the mock's reset, so the
			// cooldown ends at the reset, give or take the rounding to a second.
			lo, hi := armed.Add(quotaResetsIn), added.Add(quotaResetsIn+durationSlack)
			if v.Status != actors.StatusCooling || v.CooldownReason != "quota" || v.CooldownUntil.Before(lo.Add(-time.Second)) || v.CooldownUntil.After(hi) {
				return fmt.Errorf("%s (%s): status %s reason %q until %v, want cooling for quota until the reset %v…%v",
					name, f.Kind, v.Status, v.CooldownReason, v.CooldownUntil.Format(time.TimeOnly), lo.Format(time.TimeOnly), hi.Format(time.TimeOnly))
			}
			return nil
		}
		// OpenAI's insufficient_quota gives no reset: the default applies.
		return cooling("quota", quotaDefault-time.Second, quotaDefault+time.Second)
	case upstream.ClassRate:
		return cooling("rate", rateRetryAfter-time.Second, transientMax+rateRetryAfter)
	case upstream.ClassAuth:
		if v.Status != actors.StatusUnauthorized {
			return fmt.Errorf("%s (%s): status %s, want unauthorized", name, f.Kind, v.Status)
		}
	case upstream.ClassBanned:
		if v.Status != actors.StatusBanned {
			return fmt.Errorf("%s (%s): status %s, want banned", name, f.Kind, v.Status)
		}
	case upstream.ClassTransient:
		switch {
		case v.FailureStreak < 3:
			if v.Status != actors.StatusActive {
				return fmt.Errorf("%s (%s): %d transient failures (fewer than 3 in a row), status %s, want active", name, f.Kind, v.FailureStreak, v.Status)
			}
		case v.Status == actors.StatusActive:
			if now.Sub(last) < transientBase {
				return fmt.Errorf("%s (%s): %d transient failures in a row, the last %v ago, but active", name, f.Kind, v.FailureStreak, now.Sub(last))
			}
		default:
			return cooling("transient", transientBase, transientMax)
		}
	}
	return nil
}

// faultClass is the failure class each pre-content fault kind must get.
func faultClass(k mock.FaultKind) upstream.Class {
	switch k {
	case mock.FaultRateLimitReset:
		return upstream.ClassQuota
	case mock.FaultRateLimitRetryAfter:
		return upstream.ClassRate
	case mock.FaultUnauthorized:
		return upstream.ClassAuth
	case mock.FaultDeactivated:
		return upstream.ClassBanned
	}
	return upstream.ClassTransient
}

// usageRow is one row of usage_records.
type usageRow struct {
	requestID, accountID, route, errorClass string
	status, attempts                        int
	stream                                  bool
}

// usageRows waits until every request made so far has ended and its usage
// record is stored (usageSettled), checks that at least want rows are,
// then reads every row of usage_records.
func usageRows(t testing.TB, d *demo, want int) []usageRow {
	t.Helper()
	usageSettled(t, d.app)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := d.app.store.CountUsage(ctx)
	if err != nil {
		t.Fatalf("CountUsage: %v", err)
	}
	if n < int64(want) {
		t.Fatalf("CountUsage = %d once every request ended, want at least %d", n, want)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.app.cfg.DataDir, "troupe.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatalf("open usage db: %v", err)
	}
	defer db.Close()
	q, err := db.QueryContext(ctx, `SELECT request_id, account_id, route, error_class, status, attempts, stream FROM usage_records`)
	if err != nil {
		t.Fatalf("query usage: %v", err)
	}
	defer q.Close()
	var rows []usageRow
	for q.Next() {
		var r usageRow
		if err := q.Scan(&r.requestID, &r.accountID, &r.route, &r.errorClass, &r.status, &r.attempts, &r.stream); err != nil {
			t.Fatalf("scan usage: %v", err)
		}
		rows = append(rows, r)
	}
	if err := q.Err(); err != nil {
		t.Fatalf("usage rows: %v", err)
	}
	return rows
}

// TestTransientBackoffSchedule: an account failing with 500 on every
// request rests after three failures in a row, and its first rest is the
// first step of the schedule the issue gives for transient classes (30 s,
// 60 s, 120 s … capped at 10 min). A rate limit without Retry-After starts
// at 30 s too.
func TestTransientBackoffSchedule(t *testing.T) {
	cfg := suiteConfig(testConfig(t))
	cfg.Gateway.MaxAttempts = 1
	d := startTestDemo(t, cfg, tuned([]int{2, 4}, func(ma *mock.Account, sa *storage.Account) {
		ma.Latency, ma.TokensPerSecond = 0, 0
		switch ma.Name {
		case "demo-0002":
			ma.Fault = &mock.Fault{Kind: mock.FaultServerError}
		case "demo-0004":
			ma.Fault = &mock.Fault{Kind: mock.FaultRateLimitRetryAfter, RetryAfter: -1} // no Retry-After header
		}
		ma.Models, sa.Models = []string{ma.Name}, []string{ma.Name} // one model per account: requests pick it
	}))
	view := func(name string) actors.View {
		for _, v := range d.app.sys.Views() {
			if v.Name == name {
				return v
			}
		}
		t.Fatalf("no view of %s", name)
		return actors.View{}
	}
	body := func(model string) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
	}
	for i := 1; i <= 3; i++ {
		resp, b := d.post(t, "/v1/chat/completions", body("demo-0002"))
		if resp.StatusCode != 502 {
			t.Fatalf("request %d: status %d, want 502 (the only account failed with a 5xx): %s", i, resp.StatusCode, b)
		}
		eventually(t, 5*time.Second, "failure counted", func() (bool, string) {
			v := view("demo-0002")
			return v.Failures == uint64(i) && v.InFlight == 0, fmt.Sprintf("%d failures", v.Failures)
		})
		if v := view("demo-0002"); i < 3 && v.Status != actors.StatusActive {
			t.Errorf("after %d transient failures: status %s %s, want active (a rest only after 3 in a row)", i, v.Status, v.CooldownReason)
		}
	}
	v := view("demo-0002")
	if got := v.CooldownUntil.Sub(v.FailedAt(upstream.ClassTransient)); v.Status != actors.StatusCooling || got != transientBase {
		t.Errorf("after 3 transient failures in a row: status %s, cooling %v, want the first backoff step %v "+
			"(actors/account.go penalize counts backoff steps for the isolated failures that did not rest)", v.Status, got, transientBase)
	}

	resp, b := d.post(t, "/v1/chat/completions", body("demo-0004"))
	if resp.StatusCode != 429 {
		t.Fatalf("rate limited: status %d: %s", resp.StatusCode, b)
	}
	eventually(t, 5*time.Second, "rate failure counted", func() (bool, string) {
		v := view("demo-0004")
		return v.Failures == 1, v.Status.String()
	})
	v = view("demo-0004")
	if got := v.CooldownUntil.Sub(v.FailedAt(upstream.ClassRate)); v.Status != actors.StatusCooling || v.CooldownReason != "rate" || got != transientBase {
		t.Errorf("after one rate limit without Retry-After: status %s %q, cooling %v, want rate for %v", v.Status, v.CooldownReason, got, transientBase)
	}
}

// TestFailoverExhaustsPoolPromptly: when every account that could serve a
// request has failed it before MaxAttempts is reached, the client gets the
// last failure at once, not after waiting MaxWait for an account that the
// request has already excluded.
func TestFailoverExhaustsPoolPromptly(t *testing.T) {
	cfg := suiteConfig(testConfig(t))
	cfg.Gateway.MaxAttempts = 3
	cfg.Gateway.MaxWait = 3 * time.Second
	d := startTestDemo(t, cfg, tuned([]int{2, 4}, func(ma *mock.Account, sa *storage.Account) {
		ma.Latency = 0
		ma.Fault = &mock.Fault{Kind: mock.FaultBadGateway}
	}))
	parked := func() uint64 {
		st, err := d.app.sys.SchedulerStats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return st.Parked
	}
	before := parked()
	resp, b := d.post(t, "/v1/chat/completions", suiteRoutes[0].body())
	if resp.StatusCode != 502 {
		t.Errorf("status %d, want the last upstream's 502: %s", resp.StatusCode, b)
	}
	if n := parked() - before; n != 0 {
		t.Errorf("%d acquires parked after both accounts had failed (MaxWait %v): the third attempt's Acquire "+
			"waited for capacity although every live candidate is in its Exclude list", n, cfg.Gateway.MaxWait)
	}
	for _, n := range d.names {
		if st := d.fleet.Stats(n); st.Requests != 1 {
			t.Errorf("%s: %d upstream requests, want 1", n, st.Requests)
		}
	}
}

// TestExhaustedFailoverHidesAccountErrors: when every attempt failed for
// reasons of the upstream accounts (here: a revoked credential, a
// deactivated account), the client must not get those accounts' own
// refusals. A 401 "Incorrect API key provided: sk-…" tells the client that
// ITS key is bad (the SDKs raise AuthenticationError; Codex CLI re-logs in)
// and leaks part of the upstream credential; a 402/403 tells it to pay. The
// gateway answers in its own words with a retryable server status.
func TestExhaustedFailoverHidesAccountErrors(t *testing.T) {
	// Two accounts per kind, one of each fault; which fails last depends
	// on the scheduler's order and does not matter.
	for _, tc := range []struct {
		name  string
		kinds [2]mock.FaultKind
	}{
		{"last_unauthorized", [2]mock.FaultKind{mock.FaultDeactivated, mock.FaultUnauthorized}},
		{"last_deactivated", [2]mock.FaultKind{mock.FaultUnauthorized, mock.FaultDeactivated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := suiteConfig(testConfig(t))
			cfg.Gateway.MaxAttempts = 2
			i := 0
			d := startTestDemo(t, cfg, tuned([]int{1, 2, 3, 4}, func(ma *mock.Account, sa *storage.Account) {
				ma.Latency = 0
				ma.Fault = &mock.Fault{Kind: tc.kinds[i/2]} // demo-0001, -0002: first kind; -0003, -0004: second
				i++
			}))
			for _, rt := range []suiteRoute{suiteRoutes[0], suiteRoutes[2]} {
				resp, b := d.post(t, "/v1"+rt.path, rt.body())
				if resp.StatusCode < 500 {
					t.Errorf("%s: status %d after every account failed for its own reasons, want a 5xx of the gateway: %s", rt.name, resp.StatusCode, b)
				}
				for _, leak := range []string{"Incorrect API key", "mock-tok", "deactivated", "token_invalidated"} {
					if bytes.Contains(b, []byte(leak)) {
						t.Errorf("%s: the client sees the upstream account's refusal (%q): %s", rt.name, leak, b)
						break
					}
				}
			}
		})
	}
}

// TestErrorResponsesCarryRequestID: the gateway gives every answer an
// X-Request-Id (proxy sets it first thing); error answers, where the id
// matters most, must keep it.
func TestErrorResponsesCarryRequestID(t *testing.T) {
	cfg := suiteConfig(testConfig(t))
	cfg.Gateway.MaxAttempts = 1
	d := startTestDemo(t, cfg, tuned([]int{2}, func(ma *mock.Account, sa *storage.Account) {
		ma.Latency = 0
		ma.Fault = &mock.Fault{Kind: mock.FaultServerError}
	}))
	for _, tc := range []struct {
		name, path, body string
		status           int
	}{
		{"chat JSON, upstream 500 (answered as 502 in the gateway's words)", "/v1/chat/completions", suiteRoutes[0].body(), 502},
		{"responses stream, upstream 500 before commit", "/v1/responses", suiteRoutes[5].body(), 502},
		{"missing model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404},
	} {
		resp, b := d.post(t, tc.path, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.StatusCode, tc.status, b)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: %d answer without X-Request-Id (gateway/errors.go writeError and proxy.go answerFailure reset the response headers)", tc.name, resp.StatusCode)
		}
	}
}

// TestHeldStreamFailsAfterHeartbeat: every account hangs, so the failover
// loop outlives the heartbeat interval and the SSE head is committed with
// keep-alive comments; when the last attempt times out, the client gets an
// error event in its protocol that the SDK returns from the stream.
func TestHeldStreamFailsAfterHeartbeat(t *testing.T) {
	cfg := suiteConfig(testConfig(t))
	cfg.Gateway.MaxAttempts = 2
	// Eight accounts: no account fails three times in a row here, so none
	// cools down (a request whose every candidate is cooling waits MaxWait).
	d := startTestDemo(t, cfg, tuned(span(1, 8, 1), func(ma *mock.Account, sa *storage.Account) {
		ma.Fault = &mock.Fault{Kind: mock.FaultHang}
	}))
	client := openai.NewClient(option.WithBaseURL(d.base), option.WithAPIKey(d.apiKey), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	chat := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    demoOpenAIModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	n := 0
	for chat.Next() {
		n++
	}
	var se *ssestream.StreamError
	if err := chat.Err(); !errors.As(err, &se) || n != 0 {
		t.Errorf("chat: %d chunks, then %v (%T); want no chunk and the SDK's StreamError", n, err, err)
	}
	chat.Close()

	for _, model := range []string{demoCodexModel, demoOpenAIModel} {
		rs := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: model,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var types []string
		for rs.Next() {
			types = append(types, rs.Current().Type)
		}
		if err := rs.Err(); !errors.As(err, &se) {
			t.Errorf("responses %s: events %v, then %v (%T); want the SDK's StreamError", model, types, err, err)
		}
		rs.Close()
	}

	// On the wire: heartbeats, then only the error; the suite's parsers
	// must see a failed stream, not a corrupt answer.
	for _, rt := range []suiteRoute{suiteRoutes[1], suiteRoutes[3], suiteRoutes[5]} {
		resp, b := d.post(t, "/v1"+rt.path, rt.body())
		var comments int
		var err error
		if rt.responses {
			_, comments, err = responsesStreamText(b)
		} else {
			_, comments, err = strictChatStreamText(b)
		}
		if resp.StatusCode != 200 || comments == 0 || !errors.Is(err, errStreamFailed) {
			t.Errorf("raw %s: status %d, %d heartbeats, %v: %s", rt.name, resp.StatusCode, comments, err, b)
		}
	}
	d.assertNoLeases(t)
}

// TestBreakAfterCommit: every account cuts its answer after the first half
// of the content. The client has seen content, so the gateway cannot fail
// over: it must end the stream with a well-formed error in the client's
// protocol, which the official SDK returns from the stream, never a silent
// truncation, and the text before it is one account's script, unspliced.
// JSON requests fail over (nothing was written) and end in an error status.
func TestBreakAfterCommit(t *testing.T) {
	cfg := suiteConfig(testConfig(t))
	cfg.Gateway.MaxAttempts = 2
	d := startTestDemo(t, cfg, tuned(span(1, 4, 1), func(ma *mock.Account, sa *storage.Account) {
		ma.Latency, ma.TokensPerSecond = 0, 0
		ma.Fault = &mock.Fault{Kind: mock.FaultDisconnectAfterContent}
	}))
	client := openai.NewClient(
		option.WithBaseURL(d.base),
		option.WithAPIKey(d.apiKey),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(30*time.Second),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// checkPartial checks that text is a proper, non-empty prefix of the
	// script of the one account it names.
	checkPartial := func(t *testing.T, text string, parity int) {
		t.Helper()
		m := answerName.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("partial text %q names no account", text)
		}
		full := mock.AnswerText(m[1], faultSuiteTokens)
		if !strings.HasPrefix(full, text) || text == full {
			t.Errorf("partial text %q is not a proper prefix of %s's script %q (spliced or duplicated)", text, m[1], full)
		}
		var num int
		fmt.Sscanf(m[1], "demo-%d", &num)
		if num%2 != parity {
			t.Errorf("served by %s, an account of the wrong kind", m[1])
		}
	}

	t.Run("chat_stream_sdk", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    demoOpenAIModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		defer stream.Close()
		var text strings.Builder
		for stream.Next() {
			for _, c := range stream.Current().Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		err := stream.Err()
		var se *ssestream.StreamError
		if !errors.As(err, &se) {
			t.Fatalf("stream ended with %v (%T) after %q, want the SDK's StreamError: a silent truncation", err, err, text.String())
		}
		t.Logf("SDK error: %v", err)
		checkPartial(t, text.String(), 0)
	})

	for _, tc := range []struct {
		name   string
		model  string
		parity int
	}{{"codex", demoCodexModel, 1}, {"openai", demoOpenAIModel, 0}} {
		t.Run("responses_stream_sdk_"+tc.name, func(t *testing.T) {
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: tc.model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			})
			defer stream.Close()
			var text strings.Builder
			var types []string
			for stream.Next() {
				ev := stream.Current()
				types = append(types, ev.Type)
				if ev.Type == "response.output_text.delta" {
					text.WriteString(ev.Delta)
				}
			}
			checkPartial(t, text.String(), tc.parity)
			if slices.Contains(types, "response.completed") {
				t.Fatalf("events %v: a broken stream must not complete", types)
			}
			err := stream.Err()
			var se *ssestream.StreamError
			if !errors.As(err, &se) {
				t.Errorf("stream.Err() = %v after events %v: the SDK does not surface the gateway's error event as an error "+
					"(its data has no top-level \"error\" object, unlike OpenAI's wire `error` event)", err, types)
			} else {
				t.Logf("SDK error: %v", err)
			}
		})
	}

	t.Run("raw_wire", func(t *testing.T) {
		for _, rt := range []suiteRoute{suiteRoutes[1], suiteRoutes[3], suiteRoutes[5]} {
			resp, b := d.post(t, "/v1"+rt.path, rt.body())
			if resp.StatusCode != 200 {
				t.Errorf("%s: status %d: %s", rt.name, resp.StatusCode, b)
				continue
			}
			evs, _, err := parseSSE(b)
			if err != nil {
				t.Errorf("%s: %v", rt.name, err)
				continue
			}
			if rt.responses {
				n := len(evs)
				if n < 3 || evs[n-2].name != "error" || evs[n-1].name != "response.failed" {
					t.Errorf("%s: stream does not end with error, response.failed: %.600s", rt.name, b)
					continue
				}
				var created, failed struct {
					Response struct {
						ID     string `json:"id"`
						Status string `json:"status"`
						Error  *struct {
							Code    string `json:"code"`
							Message string `json:"message"`
						} `json:"error"`
					} `json:"response"`
				}
				_ = json.Unmarshal([]byte(evs[0].data), &created)
				if err := json.Unmarshal([]byte(evs[n-1].data), &failed); err != nil || failed.Response.Status != "failed" || failed.Response.Error == nil {
					t.Errorf("%s: response.failed %s (%v)", rt.name, evs[n-1].data, err)
				}
				if created.Response.ID == "" || failed.Response.ID != created.Response.ID {
					t.Errorf("%s: response.failed is for %q, the stream created %q", rt.name, failed.Response.ID, created.Response.ID)
				}
				continue
			}
			last := evs[len(evs)-1]
			var ch struct {
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal([]byte(last.data), &ch); err != nil || ch.Error == nil {
				t.Errorf("%s: last event %q, want an error chunk", rt.name, last.data)
			} else if _, err := parseOpenAIError([]byte(last.data)); err != nil {
				t.Errorf("%s: error chunk %s: %v", rt.name, last.data, err)
			}
			for _, ev := range evs {
				if ev.data == "[DONE]" {
					t.Errorf("%s: [DONE] in a broken stream", rt.name)
				}
			}
		}
	})

	t.Run("json_fails_over_then_errors", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    demoOpenAIModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode < 500 {
			t.Fatalf("chat JSON over broken accounts: %v, want a 5xx API error", err)
		}
		_, err = client.Responses.New(ctx, responses.ResponseNewParams{
			Model: demoCodexModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		if !errors.As(err, &ae) || ae.StatusCode < 500 {
			t.Fatalf("responses JSON over broken accounts: %v, want a 5xx API error", err)
		}
	})
	d.assertNoLeases(t)
}

// BenchmarkFailoverFirstByte measures a streamed chat request's time to
// first byte when the first k accounts tried fail fast (500), over a pool of
// exactly k failing accounts and one good one with MaxAttempts k+1. The
// failing accounts are put back in the pool before every request (outside
// the timer) so that each request meets all of them; the attempts each
// request really made are read back from its usage record and reported.
//
//	go test -run '^$' -bench FailoverFirstByte -benchtime 300x ./cmd/troupe/
func BenchmarkFailoverFirstByte(b *testing.B) {
	for k := range 4 {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) { benchFailover(b, k) })
	}
}

func benchFailover(b *testing.B, k int) {
	cfg, err := loadConfig("", func() []string { return nil })
	if err != nil {
		b.Fatal(err)
	}
	cfg.Listen, cfg.DataDir, cfg.Log.Level = "127.0.0.1:0", b.TempDir(), "error"
	cfg.Gateway.MaxAttempts = k + 1
	cfg.Policies.Active = "least_inflight" // least recently granted first: the failing accounts, then the good one
	good := fmt.Sprintf("demo-%04d", 2*(k+1))
	numbers := span(2, 2*(k+1), 2)
	var poolAccounts []storage.Account
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := startDemoWith(ctx, cfg, io.Discard, func(addr string) ([]mock.Account, []storage.Account) {
		fa, pa := tuned(numbers, func(ma *mock.Account, sa *storage.Account) {
			ma.Latency, ma.TokensPerSecond = 0, 0
			if ma.Name != good {
				ma.Fault = &mock.Fault{Kind: mock.FaultServerError}
			}
		})(addr)
		return fa, pa
	})
	if err != nil {
		b.Fatal(err)
	}
	defer d.close()
	poll.Until(b, 30*time.Second, "the views published", func() bool { return len(d.app.sys.Views()) >= k+1 })
	if poolAccounts, err = d.app.store.ListAccounts(ctx); err != nil {
		b.Fatal(err)
	}
	// restore puts cooling failing accounts back: disabling and re-enabling
	// an account makes it active again.
	restore := func() {
		for _, a := range poolAccounts {
			if v, _ := d.app.sys.View(a.ID); v.Status == actors.StatusActive {
				continue
			}
			a.Disabled = true
			d.app.sys.PutAccount(a)
			a.Disabled = false
			d.app.sys.PutAccount(a)
			for deadline := time.Now().Add(5 * time.Second); ; {
				if v, _ := d.app.sys.View(a.ID); v.Status == actors.StatusActive {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s did not come back", a.Name)
				}
				time.Sleep(time.Millisecond)
			}
		}
		// The scheduler's view follows the snapshot: ask it until it has
		// every account available again.
		for deadline := time.Now().Add(10 * time.Second); ; {
			st, err := d.app.sys.SchedulerStats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if st.Available == len(poolAccounts) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the scheduler has %d of %d accounts available", st.Available, len(poolAccounts))
			}
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := suiteRoutes[1].body() // chat stream on openai accounts
	one := func() (time.Duration, string) {
		req, _ := http.NewRequest(http.MethodPost, d.app.baseURL()+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+d.apiKey)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.Peek(1); err != nil {
			b.Fatalf("first byte: %v", err)
		}
		ttfb := time.Since(start)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(rest, []byte("[DONE]")) {
			b.Fatalf("status %d: %.300s", resp.StatusCode, rest)
		}
		return ttfb, resp.Header.Get("X-Request-Id")
	}
	for range 3 { // warm up connections and the scheduler's order
		restore()
		one()
	}
	ttfbs := make([]time.Duration, 0, b.N)
	ids := make([]string, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		restore()
		b.StartTimer()
		ttfb, id := one()
		ttfbs = append(ttfbs, ttfb)
		ids = append(ids, id)
	}
	b.StopTimer()
	slices.Sort(ttfbs)
	pct := func(p float64) float64 {
		return float64(ttfbs[min(len(ttfbs)-1, int(p*float64(len(ttfbs))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "ttfb-p50-ms")
	b.ReportMetric(pct(0.9), "ttfb-p90-ms")
	b.ReportMetric(pct(0.99), "ttfb-p99-ms")

	rows := usageRows(b, d, len(ids)+3)
	byID := map[string]int{}
	for _, r := range rows {
		byID[r.requestID] = r.attempts
	}
	dist := map[int]int{}
	total := 0
	for _, id := range ids {
		dist[byID[id]]++
		total += byID[id]
	}
	b.ReportMetric(float64(total)/float64(len(ids)), "attempts/op")
	b.Logf("k=%d: %d requests, attempts distribution %v, ttfb p50 %.2f ms p90 %.2f ms p99 %.2f ms",
		k, len(ids), dist, pct(0.5), pct(0.9), pct(0.99))
}

// TestSuiteCheckersCatchSplices makes sure the fault suite's answer checks
// are not vacuous: spliced, duplicated or cut answers are refused.
func TestSuiteCheckersCatchSplices(t *testing.T) {
	d := &testDemo{names: []string{"demo-0002", "demo-0004"}}
	a, b := mock.AnswerText("demo-0002", faultSuiteTokens), mock.AnswerText("demo-0004", faultSuiteTokens)
	if _, err := checkScript(d, a, 0, nil); err != nil {
		t.Fatalf("clean answer refused: %v", err)
	}
	for _, text := range []string{
		a[:len(a)/2] + b[len(b)/2:], // two accounts
		a + " " + a,                 // duplicated
		a[:len(a)-3],                // cut
		"Hello from demo-0002." + a[len("Hello from demo-0002."):] + "!",
	} {
		if _, err := checkScript(d, text, 0, nil); err == nil {
			t.Errorf("checkScript accepted %q", text)
		}
	}
	if _, err := checkScript(d, a, 0, map[string]mock.Fault{"demo-0002": {Kind: mock.FaultHang}}); err == nil {
		t.Errorf("checkScript accepted an answer from a faulted account")
	}

	chunk := func(id, content string) string {
		return `data: {"id":"` + id + `","object":"chat.completion.chunk","choices":[{"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
	}
	finish := `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	if _, _, err := strictChatStreamText([]byte(chunk("c1", "Hi") + finish + "data: [DONE]\n\n")); err != nil {
		t.Fatalf("clean chat stream refused: %v", err)
	}
	for _, body := range []string{
		chunk("c1", "Hi") + chunk("c2", "there") + finish + "data: [DONE]\n\n",                                        // two completions
		chunk("c1", "Hi") + finish + finish + "data: [DONE]\n\n",                                                      // two finishes
		chunk("c1", "Hi") + finish,                                                                                    // no [DONE]
		chunk("c1", "Hi") + `data: {"error":{"message":"x","type":"server_error","param":null,"code":null}}` + "\n\n", // broken after content
	} {
		if _, _, err := strictChatStreamText([]byte(body)); err == nil || errors.Is(err, errStreamFailed) {
			t.Errorf("chat stream accepted (or taken for a clean failure): %v\n%s", err, body)
		}
	}

	ev := func(typ string, seq int, extra string) string {
		return fmt.Sprintf("event: %s\ndata: {\"type\":%q,\"sequence_number\":%d%s}\n\n", typ, typ, seq, extra)
	}
	resp := func(id, status, text string) string {
		out := `[]`
		if text != "" {
			out = `[{"type":"message","content":[{"type":"output_text","text":"` + text + `"}]}]`
		}
		return `,"response":{"id":"` + id + `","object":"response","status":"` + status + `","output":` + out + `}`
	}
	clean := ev("response.created", 0, resp("r1", "in_progress", "")) +
		ev("response.output_text.delta", 1, `,"delta":"Hi"`) +
		ev("response.output_text.done", 2, `,"text":"Hi"`) +
		ev("response.completed", 3, resp("r1", "completed", "Hi"))
	if text, _, err := responsesStreamText([]byte(clean)); err != nil || text != "Hi" {
		t.Fatalf("clean responses stream: %q, %v", text, err)
	}
	for _, body := range []string{
		strings.Replace(clean, `"sequence_number":2`, `"sequence_number":1`, 1),                                                               // repeated event
		strings.Replace(clean, `"id":"r1","object":"response","status":"completed"`, `"id":"r2","object":"response","status":"completed"`, 1), // two responses
		strings.Replace(clean, `"text":"Hi"}`, `"text":"Hi Hi"}`, 1),                                                                          // done text differs
		clean[:strings.Index(clean, "event: response.completed")],                                                                             // cut
	} {
		if _, _, err := responsesStreamText([]byte(body)); err == nil || errors.Is(err, errStreamFailed) {
			t.Errorf("responses stream accepted (or taken for a clean failure): %v\n%s", err, body)
		}
	}
}
