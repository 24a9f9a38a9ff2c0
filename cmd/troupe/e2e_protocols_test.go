package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// providerModels are the demo pool's models by the provider serving them.
var providerModels = []struct {
	provider storage.Provider
	model    string
}{
	{storage.ProviderCodex, demoCodexModel},
	{storage.ProviderOpenAI, demoOpenAIModel},
	{storage.ProviderAnthropic, demoAnthropicModel},
	{storage.ProviderOpenAICompat, demoCompatModel},
}

// demoPool is the demo's own pool of n accounts, every provider included
// (demoProvider).
func demoPool(n int) accountsFunc {
	return func(mockAddr string) ([]mock.Account, []storage.Account) { return demoAccounts(n, mockAddr) }
}

// checkServed checks that text is exactly the mock answer (of tokens
// tokens) of one of the demo's accounts, and that this account is of
// provider p; it returns the account's name.
func (d *testDemo) checkServed(t *testing.T, what, text string, tokens int, p storage.Provider) string {
	t.Helper()
	name := d.servedBy(t, what, text, p)
	if want := mock.AnswerText(name, tokens); name != "" && text != want {
		t.Errorf("%s: answer\n%q, want\n%q", what, text, want)
	}
	return name
}

// servedBy returns the demo account an answer names, checking that it is of
// provider p.
func (d *testDemo) servedBy(t *testing.T, what, text string, p storage.Provider) string {
	t.Helper()
	m := answerFrom.FindStringSubmatch(text)
	if m == nil {
		t.Errorf("%s: answer %q does not name a demo account", what, text)
		return ""
	}
	if !slices.Contains(d.names, m[1]) {
		t.Errorf("%s: answer names %s, not an account of this demo", what, m[1])
	}
	var num int
	fmt.Sscanf(m[1], "demo-%d", &num)
	if got := demoProvider(num); got != p {
		t.Errorf("%s: served by %s, a %s account, want %s", what, m[1], got, p)
	}
	return m[1]
}

// anthropicClient is the official Anthropic Go SDK pointed at the demo:
// its base URL has no /v1 (the SDK adds it), the key goes in x-api-key.
func (d *testDemo) anthropicClient() anthropic.Client {
	return anthropic.NewClient(
		aoption.WithBaseURL(strings.TrimSuffix(d.base, "/v1")),
		aoption.WithAPIKey(d.apiKey),
		aoption.WithMaxRetries(0),
		aoption.WithRequestTimeout(30*time.Second),
	)
}

// openAIClient is the official OpenAI Go SDK pointed at the demo.
func (d *testDemo) openAIClient() openai.Client {
	return openai.NewClient(option.WithBaseURL(d.base), option.WithAPIKey(d.apiKey), option.WithMaxRetries(0), option.WithRequestTimeout(30*time.Second))
}

// messageText joins the text blocks of an Anthropic message.
func messageText(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.AsText().Text)
		}
	}
	return b.String()
}

// bashTool is a shell tool the mock fleet answers "Run '…'" prompts with.
var bashTool = anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
	Properties: map[string]any{"command": map[string]any{"type": "string"}},
	Required:   []string{"command"},
}, "bash")

// TestAnthropicSDK drives /v1/messages with the official Anthropic Go SDK
// on every provider of the pool — anthropic accounts byte for byte, codex,
// openai and openai_compat accounts translated: plain answers, streams, and
// a tool turn (tool_use, then the tool_result's answer), then count_tokens
// and the model list. Every answer must parse and be billed.
func TestAnthropicSDK(t *testing.T) {
	const tokens = 12 // demoAccount's OutputTokens
	d := startTestDemo(t, nil, demoPool(8))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ac := d.anthropicClient()
	answered := 0
	user := func(text string) []anthropic.MessageParam {
		return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
	}

	for _, pm := range providerModels {
		t.Run(string(pm.provider), func(t *testing.T) {
			m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(pm.model), MaxTokens: 256, Messages: user("hi")})
			if err != nil {
				t.Fatalf("messages: %v", err)
			}
			answered++
			if m.Type != "message" || m.Role != "assistant" || string(m.Model) != pm.model || m.StopReason != anthropic.StopReasonEndTurn {
				t.Errorf("message type %q role %q model %q stop %q", m.Type, m.Role, m.Model, m.StopReason)
			}
			d.checkServed(t, "messages", messageText(m), tokens, pm.provider)
			if m.Usage.InputTokens <= 0 || m.Usage.OutputTokens <= 0 {
				t.Errorf("usage %+v", m.Usage)
			}

			stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(pm.model), MaxTokens: 256, Messages: user("hi")})
			var acc anthropic.Message
			events := 0
			for stream.Next() {
				events++
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatalf("accumulate: %v", err)
				}
			}
			stream.Close()
			if err := stream.Err(); err != nil {
				t.Fatalf("stream after %d events: %v", events, err)
			}
			answered++
			d.checkServed(t, "messages stream", messageText(&acc), tokens, pm.provider)
			if acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens <= 0 {
				t.Errorf("stream stop %q usage %+v", acc.StopReason, acc.Usage)
			}

			// A tool turn, streamed: the mock calls bash with the command.
			prompt := "Run 'echo sdk-" + string(pm.provider) + "' and tell me what it printed."
			stream = ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(pm.model), MaxTokens: 256,
				Messages: user(prompt), Tools: []anthropic.ToolUnionParam{bashTool}})
			var call anthropic.Message
			for stream.Next() {
				if err := call.Accumulate(stream.Current()); err != nil {
					t.Fatalf("accumulate tool turn: %v", err)
				}
			}
			stream.Close()
			if err := stream.Err(); err != nil {
				t.Fatalf("tool turn: %v", err)
			}
			answered++
			var use anthropic.ToolUseBlock
			for _, c := range call.Content {
				if c.Type == "tool_use" {
					use = c.AsToolUse()
				}
			}
			var input struct{ Command string }
			if call.StopReason != anthropic.StopReasonToolUse || use.Name != "bash" || use.ID == "" ||
				json.Unmarshal(use.Input, &input) != nil || input.Command != "echo sdk-"+string(pm.provider) {
				t.Fatalf("tool turn: stop %q, tool_use %+v (input %s)", call.StopReason, use, use.Input)
			}
			result := "sdk-" + string(pm.provider)
			m, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(pm.model), MaxTokens: 256,
				Tools: []anthropic.ToolUnionParam{bashTool},
				Messages: []anthropic.MessageParam{
					anthropic.NewUserMessage(anthropic.NewTextBlock(prompt)),
					call.ToParam(),
					anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, result, false)),
				}})
			if err != nil {
				t.Fatalf("tool result turn: %v", err)
			}
			answered++
			name := d.servedBy(t, "tool result", messageText(m), pm.provider)
			if want := mock.ToolResultText(name, result); messageText(m) != want {
				t.Errorf("tool result answer %q, want %q", messageText(m), want)
			}
		})
	}

	t.Run("count_tokens", func(t *testing.T) {
		for _, pm := range providerModels {
			n, err := ac.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(pm.model), Messages: user("How many tokens is this sentence?")})
			if err != nil {
				t.Fatalf("%s: count_tokens: %v", pm.model, err)
			}
			if n.InputTokens <= 0 {
				t.Errorf("%s: input_tokens %d", pm.model, n.InputTokens)
			}
			// Only an anthropic account counts; the others get the estimate.
			resp, _ := d.do(t, http.MethodPost, "/v1/messages/count_tokens",
				strings.NewReader(`{"model":"`+pm.model+`","messages":[{"role":"user","content":"hi"}]}`),
				map[string]string{"x-api-key": d.apiKey, "anthropic-version": "2023-06-01", "Content-Type": "application/json"})
			if est := resp.Header.Get("X-Troupe-Token-Count") == "estimate"; resp.StatusCode != 200 || est == (pm.provider == storage.ProviderAnthropic) {
				t.Errorf("%s: status %d, X-Troupe-Token-Count %q", pm.model, resp.StatusCode, resp.Header.Get("X-Troupe-Token-Count"))
			}
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := ac.Models.List(ctx, anthropic.ModelListParams{})
		if err != nil {
			t.Fatalf("models: %v", err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			if m.Type != "model" || m.DisplayName == "" || m.CreatedAt.IsZero() {
				t.Errorf("model %+v", m)
			}
		}
		want := []string{demoAnthropicModel, demoOpenAIModel, demoCodexModel, demoCompatModel}
		slices.Sort(want)
		if !slices.Equal(ids, want) || page.HasMore {
			t.Errorf("models %v (has_more %v), want %v", ids, page.HasMore, want)
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "no-such-model", MaxTokens: 16, Messages: user("hi")})
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != 404 || !strings.Contains(ae.RawJSON(), `"not_found_error"`) {
			t.Errorf("unknown model: %v", err)
		}
	})

	d.assertNoLeases(t)
	d.assertUsage(t, answered)
}

// TestOpenAISDKOnEveryProvider drives Chat Completions and Responses with
// the official OpenAI Go SDK on the accounts that speak neither natively or
// only one of them — anthropic (Messages) for both, openai_compat (Chat) for
// Responses, codex (Responses) for Chat — JSON and streams, tools included.
func TestOpenAISDKOnEveryProvider(t *testing.T) {
	const tokens = 12
	d := startTestDemo(t, nil, demoPool(8))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	oc := d.openAIClient()
	answered := 0
	chatTool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name:       "bash",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}},
	})

	for _, pm := range providerModels {
		if pm.provider != storage.ProviderAnthropic && pm.provider != storage.ProviderCodex {
			continue
		}
		t.Run("chat_on_"+string(pm.provider), func(t *testing.T) {
			resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: pm.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			if err != nil {
				t.Fatalf("chat: %v", err)
			}
			answered++
			if resp.Object != "chat.completion" || len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "stop" || resp.Model != pm.model {
				t.Fatalf("chat: %+v", resp)
			}
			d.checkServed(t, "chat", resp.Choices[0].Message.Content, tokens, pm.provider)
			if resp.Usage.PromptTokens <= 0 || resp.Usage.CompletionTokens <= 0 {
				t.Errorf("chat usage %+v", resp.Usage)
			}

			stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: pm.model, Tools: []openai.ChatCompletionToolUnionParam{chatTool},
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Run 'echo chat-tool' please.")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			})
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			stream.Close()
			if err := stream.Err(); err != nil {
				t.Fatalf("chat stream: %v", err)
			}
			answered++
			if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
				t.Fatalf("chat tool stream: %+v", acc.Choices)
			}
			tc := acc.Choices[0].Message.ToolCalls[0]
			if tc.Function.Name != "bash" || tc.ID == "" || !strings.Contains(tc.Function.Arguments, "echo chat-tool") {
				t.Errorf("tool call %+v", tc)
			}
			if acc.Usage.PromptTokens <= 0 || acc.Usage.CompletionTokens <= 0 {
				t.Errorf("chat stream usage %+v", acc.Usage)
			}
			follow, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: pm.model, Tools: []openai.ChatCompletionToolUnionParam{chatTool},
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.UserMessage("Run 'echo chat-tool' please."),
					acc.Choices[0].Message.ToParam(),
					openai.ToolMessage("chat-tool", tc.ID),
				},
			})
			if err != nil {
				t.Fatalf("chat tool result: %v", err)
			}
			answered++
			name := d.servedBy(t, "chat tool result", follow.Choices[0].Message.Content, pm.provider)
			if want := mock.ToolResultText(name, "chat-tool"); follow.Choices[0].Message.Content != want {
				t.Errorf("chat tool result %q, want %q", follow.Choices[0].Message.Content, want)
			}
		})
	}

	for _, pm := range providerModels {
		if pm.provider != storage.ProviderAnthropic && pm.provider != storage.ProviderOpenAICompat {
			continue
		}
		t.Run("responses_on_"+string(pm.provider), func(t *testing.T) {
			resp, err := oc.Responses.New(ctx, responses.ResponseNewParams{
				Model: pm.model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			})
			if err != nil {
				t.Fatalf("responses: %v", err)
			}
			answered++
			if resp.Object != "response" || resp.Status != "completed" {
				t.Fatalf("responses: object %q status %q", resp.Object, resp.Status)
			}
			d.checkServed(t, "responses", resp.OutputText(), tokens, pm.provider)
			if resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens <= 0 {
				t.Errorf("responses usage %+v", resp.Usage)
			}

			stream := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: pm.model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Run 'echo responses-tool' please.")},
				Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
					Name: "bash", Parameters: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}},
				}}},
			})
			var final responses.Response
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "response.completed" {
					final = ev.Response
				}
			}
			stream.Close()
			if err := stream.Err(); err != nil {
				t.Fatalf("responses stream: %v", err)
			}
			answered++
			var fc responses.ResponseFunctionToolCall
			for _, it := range final.Output {
				if it.Type == "function_call" {
					fc = it.AsFunctionCall()
				}
			}
			if final.Status != "completed" || fc.Name != "bash" || fc.CallID == "" || !strings.Contains(fc.Arguments, "echo responses-tool") {
				t.Fatalf("responses tool stream: status %q call %+v", final.Status, fc)
			}
			if final.Usage.InputTokens <= 0 || final.Usage.OutputTokens <= 0 {
				t.Errorf("responses stream usage %+v", final.Usage)
			}
		})
	}

	d.assertNoLeases(t)
	d.assertUsage(t, answered)
}

// assertUsage waits until the store holds want successful usage records (a stream
// records its usage when the gateway closes it, just after the client read
// its last event), flushing the recorder each time.
func (d *testDemo) assertUsage(t *testing.T, want int) {
	t.Helper()
	eventually(t, 10*time.Second, "a usage record per answer", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.app.sys.FlushUsage(ctx); err != nil {
			return false, "FlushUsage: " + err.Error()
		}
		n, err := d.successfulUsage(ctx)
		return err == nil && n == want, fmt.Sprintf("successful usage records = %d (%v), want %d", n, err, want)
	})
}

// successfulUsage counts the stored usage records of successful requests
// (status < 400): failed requests are in the request log too.
func (d *testDemo) successfulUsage(ctx context.Context) (int, error) {
	recs, err := d.app.store.UsageRecords(ctx, storage.RequestLogQuery{Limit: storage.MaxRequestLogLimit})
	n := 0
	for _, r := range recs {
		if r.Status < 400 {
			n++
		}
	}
	return n, err
}
