package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/internal/telemetry/telemetrytest"
	"github.com/troupe-gw/troupe/storage"
	otlptrace "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestTracingEndToEnd runs the gateway with tracing on against an
// in-process OTLP receiver (the real OTLP/HTTP exporter, protobuf on the
// wire): each client request continues the client's W3C traceparent with a
// SERVER span named per the GenAI conventions, each upstream attempt is a
// CLIENT child naming its account, a failover shows as two attempts, and
// neither an API key, an upstream credential nor message content leaves
// the process.
func TestTracingEndToEnd(t *testing.T) {
	r := telemetrytest.NewReceiver(t)
	cfg := testConfig(t)
	cfg.Tracing.Enabled = true
	cfg.Tracing.Endpoint = r.URL
	cfg.Policies.Active = "round_robin" // both accounts in turn: one request starts on the failing one
	cfg.Gateway.QuotaProbe = 0
	d := startTestDemo(t, cfg, tuned([]int{2, 4}, func(ma *mock.Account, _ *storage.Account) {
		ma.Latency, ma.TokensPerSecond = 0, 0
		if ma.Name == "demo-0002" {
			ma.Fault = &mock.Fault{Kind: mock.FaultServerError}
		}
	}))
	if d.app.traces == nil {
		t.Fatal("tracing.enabled did not start tracing")
	}
	const secretQuestion = "tell-me-the-launch-code-5b1d"
	send := func(i int, stream bool) string {
		traceID := fmt.Sprintf("%032x", 0xabc0+i)
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, demoOpenAIModel, stream, secretQuestion)
		resp, b := d.do(t, http.MethodPost, "/v1/chat/completions", strings.NewReader(body), map[string]string{
			"Authorization": "Bearer " + d.apiKey, "Content-Type": "application/json",
			"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01",
		})
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
		}
		return traceID
	}
	traces := []string{send(1, false), send(2, false), send(3, true)}
	d.assertNoLeases(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.app.traces.ForceFlush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}

	byTrace := map[string][]telemetrytest.Span{}
	for _, sp := range r.Spans() {
		byTrace[sp.TraceID()] = append(byTrace[sp.TraceID()], sp)
	}
	failovers := 0
	for i, tid := range traces {
		var req *telemetrytest.Span
		var attempts []telemetrytest.Span
		for _, sp := range byTrace[tid] {
			switch sp.Kind {
			case otlptrace.Span_SPAN_KIND_SERVER:
				req = &sp
			case otlptrace.Span_SPAN_KIND_CLIENT:
				attempts = append(attempts, sp)
			}
		}
		if req == nil {
			t.Fatalf("request %d: no SERVER span in trace %s (received %d spans)", i+1, tid, len(r.Spans()))
		}
		if req.Name != "chat "+demoOpenAIModel || req.ParentID() != "00f067aa0ba902b7" {
			t.Errorf("request %d: span %q under %s, want \"chat %s\" under the client's span", i+1, req.Name, req.ParentID(), demoOpenAIModel)
		}
		for key, want := range map[string]string{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": demoOpenAIModel,
			"gen_ai.request.stream": fmt.Sprint(i == 2), "http.response.status_code": "200",
			"troupe.attempts": fmt.Sprint(len(attempts)),
		} {
			if got, _ := req.Attr(key); got != want {
				t.Errorf("request %d: %s = %q, want %q", i+1, key, got, want)
			}
		}
		for _, key := range []string{"gen_ai.response.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons"} {
			if _, ok := req.Attr(key); !ok {
				t.Errorf("request %d: no %s", i+1, key)
			}
		}
		if _, ok := req.Attr("gen_ai.response.time_to_first_chunk"); ok != (i == 2) {
			t.Errorf("request %d: time_to_first_chunk present %v, want it on the stream only", i+1, ok)
		}
		if req.Resource["service.name"] != "troupe" {
			t.Errorf("resource %v", req.Resource)
		}
		if len(attempts) == 0 || len(attempts) > 2 {
			t.Fatalf("request %d: %d attempt spans", i+1, len(attempts))
		}
		for _, a := range attempts {
			name, _ := a.Attr("troupe.account.name")
			n, _ := a.Attr("troupe.attempt")
			if a.ParentID() != req.ID() || a.Name != "chat "+demoOpenAIModel {
				t.Errorf("request %d: attempt %q under %s, want under the request span %s", i+1, a.Name, a.ParentID(), req.ID())
			}
			if inst, _ := a.Attr("troupe.instance"); inst == "" {
				t.Errorf("request %d: attempt on %s names no instance", i+1, name)
			}
			if pol, _ := a.Attr("troupe.route.policy"); pol != "round_robin" {
				t.Errorf("request %d: attempt %s: troupe.route.policy %q", i+1, n, pol)
			}
			class, failed := a.Attr("error.type")
			switch name {
			case "demo-0002":
				if status, _ := a.Attr("http.response.status_code"); !failed || class != "transient" || status != "500" {
					t.Errorf("request %d: attempt %s on the failing account: error.type %q, status %s", i+1, n, class, status)
				}
			case "demo-0004":
				if failed {
					t.Errorf("request %d: attempt %s on the healthy account failed: %s", i+1, n, class)
				}
			default:
				t.Errorf("request %d: attempt on account %q", i+1, name)
			}
		}
		if len(attempts) == 2 {
			failovers++
		}
	}
	if failovers == 0 {
		t.Errorf("no request failed over (round_robin should have started one on demo-0002)")
	}
	for what, secret := range map[string]string{
		"the client's API key":   d.apiKey,
		"an upstream credential": "mock-token-demo-0002",
		"the other credential":   "mock-token-demo-0004",
		"the message content":    secretQuestion,
		"the answer's content":   mock.AnswerText("demo-0004", 12),
	} {
		if r.Contains(secret) {
			t.Errorf("%s was exported in a span", what)
		}
	}
}
