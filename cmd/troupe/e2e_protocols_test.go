package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

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

// TestTranslatedSDKs drives translated paths with the official SDKs: the
// Anthropic SDK's Messages calls served by codex (Responses) and openai
// accounts, and the OpenAI SDK's Chat calls served by codex accounts. The
// SDKs must parse every answer and stream, and every answer must be billed.
func TestTranslatedSDKs(t *testing.T) {
	const tokens = 12 // demoAccount's OutputTokens
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ac := d.anthropicClient()
	answered := 0

	for _, tc := range []struct {
		model  string
		parity int
	}{{demoCodexModel, 1}, {demoOpenAIModel, 0}} {
		t.Run("messages_on_"+tc.model, func(t *testing.T) {
			m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{
				Model: anthropic.Model(tc.model), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			if err != nil {
				t.Fatalf("messages: %v", err)
			}
			answered++
			if m.Type != "message" || m.Role != "assistant" || string(m.Model) != tc.model || m.StopReason != anthropic.StopReasonEndTurn {
				t.Errorf("message type %q role %q model %q stop %q", m.Type, m.Role, m.Model, m.StopReason)
			}
			d.checkAnswer(t, "messages", messageText(m), tokens, tc.parity)
			if m.Usage.InputTokens <= 0 || m.Usage.OutputTokens <= 0 {
				t.Errorf("usage %+v", m.Usage)
			}
		})
		t.Run("messages_stream_on_"+tc.model, func(t *testing.T) {
			stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: anthropic.Model(tc.model), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			defer stream.Close()
			var m anthropic.Message
			events := 0
			for stream.Next() {
				events++
				if err := m.Accumulate(stream.Current()); err != nil {
					t.Fatalf("accumulate: %v", err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream after %d events: %v", events, err)
			}
			answered++
			d.checkAnswer(t, "messages stream", messageText(&m), tokens, tc.parity)
			if m.StopReason != anthropic.StopReasonEndTurn || m.Usage.OutputTokens <= 0 {
				t.Errorf("stop %q usage %+v", m.StopReason, m.Usage)
			}
		})
	}

	t.Run("count_tokens_estimate", func(t *testing.T) {
		n, err := ac.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
			Model:    anthropic.Model(demoCodexModel),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this sentence?"))},
		})
		if err != nil {
			t.Fatalf("count_tokens: %v", err)
		}
		if n.InputTokens <= 0 {
			t.Errorf("input_tokens %d", n.InputTokens)
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
		if strings.Join(ids, ",") != demoOpenAIModel+","+demoCodexModel {
			t.Errorf("models %v", ids)
		}
	})

	oc := openai.NewClient(option.WithBaseURL(d.base), option.WithAPIKey(d.apiKey), option.WithMaxRetries(0), option.WithRequestTimeout(30*time.Second))
	t.Run("chat_on_codex", func(t *testing.T) {
		resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: demoCodexModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		answered++
		if resp.Object != "chat.completion" || len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "stop" {
			t.Fatalf("chat: %+v", resp)
		}
		d.checkAnswer(t, "chat", resp.Choices[0].Message.Content, tokens, 1)
	})
	t.Run("chat_stream_on_codex", func(t *testing.T) {
		stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: demoCodexModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("chat stream: %v", err)
		}
		answered++
		if len(acc.Choices) != 1 {
			t.Fatalf("chat stream: %d choices", len(acc.Choices))
		}
		d.checkAnswer(t, "chat stream", acc.Choices[0].Message.Content, tokens, 1)
		if acc.Usage.PromptTokens <= 0 || acc.Usage.CompletionTokens <= 0 {
			t.Errorf("chat stream usage %+v", acc.Usage)
		}
	})

	d.assertNoLeases(t)
	d.assertUsage(t, answered)
}

// assertUsage waits until the store holds want usage records (a stream
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
		n, err := d.app.store.CountUsage(ctx)
		return err == nil && n == int64(want), fmt.Sprintf("CountUsage = %d (%v), want %d", n, err, want)
	})
}
