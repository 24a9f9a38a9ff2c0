package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestSDK drives the gateway with the official OpenAI Go SDK: Chat
// Completions and Responses, JSON and streams, on codex and openai accounts,
// and the model list; then checks that every answer left a usage record.
func TestSDK(t *testing.T) {
	const tokens = 12 // demoAccount's OutputTokens
	d := startTestDemo(t, nil, tuned(span(1, 6, 1), nil))
	client := openai.NewClient(
		option.WithBaseURL(d.base),
		option.WithAPIKey(d.apiKey),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(30*time.Second),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	succeeded := 0

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    demoOpenAIModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		succeeded++
		if resp.Object != "chat.completion" || resp.ID == "" || len(resp.Choices) != 1 {
			t.Fatalf("chat: object %q id %q, %d choices", resp.Object, resp.ID, len(resp.Choices))
		}
		d.checkAnswer(t, "chat", resp.Choices[0].Message.Content, tokens, 0)
		if resp.Usage.PromptTokens <= 0 || resp.Usage.CompletionTokens <= 0 || resp.Usage.TotalTokens <= 0 {
			t.Errorf("chat usage %+v: want tokens > 0", resp.Usage)
		}
	})

	t.Run("chat_stream", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         demoOpenAIModel,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			chunks++
			acc.AddChunk(ch)
			for _, c := range ch.Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("chat stream: %v (after %d chunks)", err, chunks)
		}
		succeeded++
		d.checkAnswer(t, "chat stream deltas", text.String(), tokens, 0)
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != text.String() {
			t.Errorf("chat stream: accumulated %+v, deltas %q", acc.Choices, text.String())
		}
		if acc.Usage.PromptTokens <= 0 || acc.Usage.CompletionTokens <= 0 || acc.Usage.TotalTokens <= 0 {
			t.Errorf("chat stream usage %+v: want tokens > 0 (stream_options.include_usage)", acc.Usage)
		}
	})

	for _, tc := range []struct {
		name   string
		model  string
		parity int
	}{
		{"codex", demoCodexModel, 1},
		{"openai", demoOpenAIModel, 0},
	} {
		t.Run("responses_"+tc.name, func(t *testing.T) {
			resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
				Model: tc.model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			})
			if err != nil {
				t.Fatalf("responses: %v", err)
			}
			succeeded++
			if resp.Object != "response" || resp.ID == "" || resp.Status != "completed" {
				t.Errorf("responses: object %q id %q status %q", resp.Object, resp.ID, resp.Status)
			}
			d.checkAnswer(t, "responses", resp.OutputText(), tokens, tc.parity)
			if resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens <= 0 || resp.Usage.TotalTokens <= 0 {
				t.Errorf("responses usage %+v: want tokens > 0", resp.Usage)
			}
		})

		t.Run("responses_stream_"+tc.name, func(t *testing.T) {
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: tc.model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			})
			defer stream.Close()
			var deltas strings.Builder
			var completed *responses.Response
			var types []string
			for stream.Next() {
				ev := stream.Current()
				types = append(types, ev.Type)
				switch ev.Type {
				case "response.output_text.delta":
					deltas.WriteString(ev.Delta)
				case "response.completed":
					r := ev.Response
					completed = &r
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("responses stream: %v (events %v)", err, types)
			}
			succeeded++
			if len(types) == 0 || types[0] != "response.created" {
				t.Errorf("responses stream: events %v, want response.created first", types)
			}
			d.checkAnswer(t, "responses stream deltas", deltas.String(), tokens, tc.parity)
			if completed == nil {
				t.Fatalf("responses stream: no response.completed event (events %v)", types)
			}
			if got := completed.OutputText(); got != deltas.String() {
				t.Errorf("responses stream: completed text %q != deltas %q", got, deltas.String())
			}
			if u := completed.Usage; u.InputTokens <= 0 || u.OutputTokens <= 0 || u.TotalTokens <= 0 {
				t.Errorf("responses stream usage %+v: want tokens > 0", u)
			}
		})
	}

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatalf("models: %v", err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			if m.Object != "model" || m.OwnedBy == "" {
				t.Errorf("model %q: object %q owned_by %q", m.ID, m.Object, m.OwnedBy)
			}
		}
		for _, want := range []string{demoCodexModel, demoOpenAIModel} {
			if !slices.Contains(ids, want) {
				t.Errorf("models %v: %s missing", ids, want)
			}
		}
	})

	t.Run("usage_recorded", func(t *testing.T) {
		if succeeded != 6 {
			t.Logf("%d of 6 requests succeeded", succeeded)
		}
		d.assertNoLeases(t)
		usageSettled(t, d.app) // every request ended: the records are final
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		defer fcancel()
		if n, err := d.successfulUsage(fctx); err != nil || n != succeeded {
			t.Errorf("successful usage records = %d, %v; want %d (one per successful request)", n, err, succeeded)
		}
	})
}
