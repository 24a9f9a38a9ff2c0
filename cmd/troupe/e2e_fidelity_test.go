package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// Protocol fidelity end to end (issue #15): upstreams written by hand, as
// the public bug reports against peer gateways describe them, answer
// through Troupe to the official Anthropic SDK, whose stream accumulator
// judges what it gets.

// fidelityUpstream is an upstream on 127.0.0.1 that answers Chat requests
// with two parallel calls opened before either's arguments, and Responses
// requests with a reasoning item whose encrypted_content comes only in
// response.completed, two function_call items added before their deltas,
// and — when the request carries tool results — a short text answer. It
// keeps every request body.
type fidelityUpstream struct {
	mu     sync.Mutex
	bodies map[string][][]byte // by path
}

// fidelityItem is the reasoning item as the Responses upstream's
// response.completed gives it.
const fidelityItem = `{"id":"rs_fid1","type":"reasoning","encrypted_content":"gAAAAB\/fidelity+blob==","summary":[{"type":"summary_text","text":"Two cities: two calls."}]}`

func (u *fidelityUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.bodies[r.URL.Path] = append(u.bodies[r.URL.Path], body)
	u.mu.Unlock()
	if r.Method != http.MethodPost {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	var out []byte
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		chunk := func(delta, finish string) {
			out = translate.AppendData(out, []byte(`{"id":"chatcmpl-fid","object":"chat.completion.chunk","created":1,"model":"fid-compat","choices":[{"index":0,"delta":`+delta+`,"finish_reason":`+finish+`}]}`))
		}
		chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_x0","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "null")
		chunk(`{"tool_calls":[{"index":1,"id":"call_x1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "null")
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, "null")
		chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":\"Paris\"}"}}]}`, "null")
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"San Francisco\"}"}}]}`, "null")
		chunk(`{}`, `"tool_calls"`)
		out = translate.AppendData(out, []byte(`{"id":"chatcmpl-fid","object":"chat.completion.chunk","created":1,"model":"fid-compat","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":30,"total_tokens":50}}`))
		out = translate.AppendData(out, []byte(`[DONE]`))
	case strings.HasSuffix(r.URL.Path, "/responses"):
		seq := 0
		ev := func(name, rest string) {
			out = translate.AppendEvent(out, name, []byte(`{"type":"`+name+`","sequence_number":`+strconv.Itoa(seq)+rest+`}`))
			seq++
		}
		ev("response.created", `,"response":{"id":"resp_fid","object":"response","created_at":1,"status":"in_progress","model":"fid-openai","output":[],"usage":null}`)
		if gjson.GetBytes(body, `input.#(type=="function_call_output")`).Exists() {
			ev("response.output_item.added", `,"output_index":0,"item":{"id":"msg_fid","type":"message","status":"in_progress","role":"assistant","content":[]}`)
			ev("response.output_text.delta", `,"item_id":"msg_fid","output_index":0,"content_index":0,"delta":"Both sunny."`)
			ev("response.output_item.done", `,"output_index":0,"item":{"id":"msg_fid","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Both sunny."}]}`)
			ev("response.completed", `,"response":{"id":"resp_fid","object":"response","created_at":1,"status":"completed","model":"fid-openai","output":[{"id":"msg_fid","type":"message","role":"assistant","content":[{"type":"output_text","text":"Both sunny."}]}],"usage":{"input_tokens":40,"output_tokens":3}}`)
			break
		}
		ev("response.output_item.added", `,"output_index":0,"item":{"id":"rs_fid1","type":"reasoning","summary":[]}`)
		ev("response.reasoning_summary_text.delta", `,"item_id":"rs_fid1","output_index":0,"summary_index":0,"delta":"Two cities: two calls."`)
		ev("response.output_item.done", `,"output_index":0,"item":{"id":"rs_fid1","type":"reasoning","summary":[{"type":"summary_text","text":"Two cities: two calls."}]}`)
		ev("response.output_item.added", `,"output_index":1,"item":{"id":"fc_a","type":"function_call","status":"in_progress","arguments":"","call_id":"call_a","name":"get_weather"}`)
		ev("response.output_item.added", `,"output_index":2,"item":{"id":"fc_b","type":"function_call","status":"in_progress","arguments":"","call_id":"call_b","name":"get_weather"}`)
		ev("response.function_call_arguments.delta", `,"item_id":"fc_b","output_index":2,"delta":"{\"city\":\"Paris\"}"`)
		ev("response.function_call_arguments.delta", `,"item_id":"fc_a","output_index":1,"delta":"{\"city\":\"San Francisco\"}"`)
		fa := `{"id":"fc_a","type":"function_call","status":"completed","arguments":"{\"city\":\"San Francisco\"}","call_id":"call_a","name":"get_weather"}`
		fb := `{"id":"fc_b","type":"function_call","status":"completed","arguments":"{\"city\":\"Paris\"}","call_id":"call_b","name":"get_weather"}`
		ev("response.output_item.done", `,"output_index":2,"item":`+fb)
		ev("response.output_item.done", `,"output_index":1,"item":`+fa)
		ev("response.completed", `,"response":{"id":"resp_fid","object":"response","created_at":1,"status":"completed","model":"fid-openai","output":[`+fidelityItem+`,`+fa+`,`+fb+`],"usage":{"input_tokens":30,"output_tokens":20}}`)
	default:
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write(out)
}

// requests returns the bodies the upstream got on a path ending in suffix.
func (u *fidelityUpstream) requests(suffix string) [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out [][]byte
	for p, bs := range u.bodies {
		if strings.HasSuffix(p, suffix) {
			out = append(out, bs...)
		}
	}
	return out
}

// TestFidelityParallelCallsAndReasoning: a Messages client (the official
// Anthropic Go SDK) gets two separate, well-formed tool_use blocks from a
// Chat upstream that interleaves its calls and from a Responses upstream
// that adds both function_call items before their deltas; the Responses
// upstream's encrypted reasoning, sent only in response.completed, reaches
// the client in the thinking block's signature, and the client's next turn
// sends the reasoning item back to the upstream byte for byte.
func TestFidelityParallelCallsAndReasoning(t *testing.T) {
	up := &fidelityUpstream{bodies: map[string][][]byte{}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	d := startTestDemo(t, nil, func(string) ([]mock.Account, []storage.Account) {
		return nil, []storage.Account{
			{Name: "fid-compat", Provider: storage.ProviderOpenAICompat, BaseURL: srv.URL + "/v1", MaxConcurrency: 4,
				Credentials: storage.Credentials{APIKey: "k1"}, Models: []string{"fid-compat"}},
			{Name: "fid-openai", Provider: storage.ProviderOpenAI, BaseURL: srv.URL + "/v1", MaxConcurrency: 4,
				Credentials: storage.Credentials{APIKey: "k2"}, Models: []string{"fid-openai"}},
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ac := d.anthropicClient()
	weather := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}, "get_weather")
	ask := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in San Francisco and Paris?"))}
	stream := func(model string, msgs []anthropic.MessageParam) anthropic.Message {
		t.Helper()
		s := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 4096,
			Thinking: anthropic.ThinkingConfigParamOfEnabled(2048), Tools: []anthropic.ToolUnionParam{weather}, Messages: msgs})
		var m anthropic.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				t.Fatalf("%s: anthropic-sdk-go Accumulate: %v", model, err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("%s: stream: %v", model, err)
		}
		return m
	}
	calls := func(model string, m anthropic.Message) []anthropic.ContentBlockUnion {
		t.Helper()
		var tools []anthropic.ContentBlockUnion
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				tools = append(tools, b)
			}
		}
		want := map[string]string{"San Francisco": "", "Paris": ""}
		for _, b := range tools {
			var in struct{ City string }
			if err := json.Unmarshal(b.Input, &in); err != nil || b.Name != "get_weather" || b.ID == "" {
				t.Errorf("%s: tool_use %s %q input %s: %v", model, b.ID, b.Name, b.Input, err)
			}
			if _, ok := want[in.City]; !ok || want[in.City] != "" {
				t.Errorf("%s: unexpected or repeated call for %q", model, in.City)
			}
			want[in.City] = b.ID
		}
		if len(tools) != 2 || tools[0].ID == tools[1].ID || m.StopReason != "tool_use" {
			t.Fatalf("%s: %d tool_use blocks, stop_reason %s: %+v", model, len(tools), m.StopReason, m.Content)
		}
		return tools
	}

	calls("fid-compat", stream("fid-compat", ask))

	m := stream("fid-openai", ask)
	tools := calls("fid-openai", m)
	if m.Content[0].Type != "thinking" || m.Content[0].Signature == "" || m.Content[0].Thinking != "Two cities: two calls." {
		t.Fatalf("no signed thinking block first: %+v", m.Content)
	}
	next := append(ask, m.ToParam(), anthropic.NewUserMessage(
		anthropic.NewToolResultBlock(tools[0].ID, "sunny", false), anthropic.NewToolResultBlock(tools[1].ID, "sunny", false)))
	final := stream("fid-openai", next)
	if len(final.Content) == 0 || final.Content[len(final.Content)-1].Text != "Both sunny." {
		t.Fatalf("the tool turn's answer: %+v", final.Content)
	}
	reqs := up.requests("/responses")
	if len(reqs) != 2 {
		t.Fatalf("%d Responses requests upstream, want 2", len(reqs))
	}
	if got := gjson.GetBytes(reqs[1], `input.#(type=="reasoning")`).Raw; got != fidelityItem {
		t.Errorf("the next turn sent the reasoning item\n%s\nnot, as the upstream gave it,\n%s", got, fidelityItem)
	}
	d.assertNoLeases(t)
}
