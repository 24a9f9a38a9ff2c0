// Package sdkcheck_test holds the tests in which the official OpenAI and
// Anthropic Go SDKs read translate's output. They live apart from package
// translate so that its fuzz targets do not build the SDKs with coverage
// instrumentation.
package sdkcheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/troupe-gw/troupe/translate"
)

// The official SDKs parse every translated answer and stream. Each recorded
// upstream answer is read once by its own protocol's SDK and once, after
// translation, by the client protocol's SDK; both must see the same text,
// tool calls, finish reason, usage and (where both protocols carry it)
// reasoning. The SDKs talk to an httptest server on 127.0.0.1 that serves
// the bytes under test.

// digest is what a client learns from an answer.
type digest struct {
	Text      string
	Refusal   string
	Reasoning string
	Tools     []digestTool
	Finish    string // stop, length, tool_calls, content_filter
	In, Out   int64
	Cached    int64
	Error     bool
}

type digestTool struct{ Name, Args string }

// normJSON re-encodes JSON text so that equal values compare equal.
func normJSON(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// serve starts a server on 127.0.0.1 answering every request with body.
func serve(t *testing.T, body []byte, stream bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func sdkCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openaiClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

func anthropicClient(url string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("k"), aoption.WithMaxRetries(0))
}

var anthropicParams = anthropic.MessageNewParams{Model: "m", MaxTokens: 16,
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}

var chatParams = openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

var responsesParams = responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}

// sdkDigest reads an answer (stream or not) of protocol p with its SDK.
func sdkDigest(t *testing.T, p translate.Protocol, body []byte, stream bool) digest {
	t.Helper()
	url := serve(t, body, stream)
	ctx := sdkCtx(t)
	switch p {
	case translate.Chat:
		c := openaiClient(url)
		if !stream {
			cc, err := c.Chat.Completions.New(ctx, chatParams)
			if err != nil {
				t.Fatalf("openai-go: %v", err)
			}
			return chatDigest(cc)
		}
		s := c.Chat.Completions.NewStreaming(ctx, chatParams)
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			if !acc.AddChunk(s.Current()) {
				t.Fatalf("openai-go accumulator rejected chunk %s", s.Current().RawJSON())
			}
		}
		d := chatDigest(&acc.ChatCompletion)
		d.Error = s.Err() != nil
		return d
	case translate.Responses:
		c := openaiClient(url)
		if !stream {
			r, err := c.Responses.New(ctx, responsesParams)
			if err != nil {
				t.Fatalf("openai-go: %v", err)
			}
			return responsesDigest(r)
		}
		s := c.Responses.NewStreaming(ctx, responsesParams)
		var d digest
		var deltas strings.Builder
		seq := int64(-1)
		for s.Next() {
			ev := s.Current()
			if ev.SequenceNumber != seq+1 && seq >= 0 && ev.SequenceNumber != 0 {
				t.Fatalf("sequence_number %d after %d", ev.SequenceNumber, seq)
			}
			seq = ev.SequenceNumber
			switch ev.Type {
			case "response.output_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.completed", "response.incomplete":
				r := ev.Response
				d = responsesDigest(&r)
			case "response.failed", "error":
				d.Error = true
			}
		}
		if s.Err() != nil {
			d.Error = true
		}
		if !d.Error && deltas.String() != d.Text {
			t.Fatalf("output_text deltas %q differ from the final text %q", deltas.String(), d.Text)
		}
		return d
	default:
		c := anthropicClient(url)
		if !stream {
			m, err := c.Messages.New(ctx, anthropicParams)
			if err != nil {
				t.Fatalf("anthropic-sdk-go: %v", err)
			}
			return messagesDigest(m)
		}
		s := c.Messages.NewStreaming(ctx, anthropicParams)
		var m anthropic.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				t.Fatalf("anthropic-sdk-go Accumulate: %v", err)
			}
		}
		d := messagesDigest(&m)
		d.Error = s.Err() != nil
		return d
	}
}

func chatDigest(cc *openai.ChatCompletion) digest {
	var d digest
	if len(cc.Choices) > 0 {
		m := cc.Choices[0].Message
		d.Text, d.Refusal = m.Content, m.Refusal
		for _, tc := range m.ToolCalls {
			d.Tools = append(d.Tools, digestTool{tc.Function.Name, normJSON(tc.Function.Arguments)})
		}
		d.Finish = cc.Choices[0].FinishReason
	}
	d.In, d.Out, d.Cached = cc.Usage.PromptTokens, cc.Usage.CompletionTokens, cc.Usage.PromptTokensDetails.CachedTokens
	return d
}

func responsesDigest(r *responses.Response) digest {
	var d digest
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				d.Text += c.Text
				d.Refusal += c.Refusal
			}
		case "function_call":
			d.Tools = append(d.Tools, digestTool{it.Name, normJSON(it.Arguments.OfString)})
		case "custom_tool_call":
			// Chat and Messages clients see a custom call's input as {"input": …}.
			in, _ := json.Marshal(map[string]string{"input": it.Input})
			d.Tools = append(d.Tools, digestTool{it.Name, string(in)})
		case "reasoning":
			for _, s := range it.Summary {
				d.Reasoning += s.Text
			}
		}
	}
	switch {
	case r.Status == "incomplete" && r.IncompleteDetails.Reason == "content_filter":
		d.Finish = "content_filter"
	case r.Status == "incomplete":
		d.Finish = "length"
	case len(d.Tools) > 0:
		d.Finish = "tool_calls"
	default:
		d.Finish = "stop"
	}
	d.In, d.Out, d.Cached = r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.InputTokensDetails.CachedTokens
	return d
}

func messagesDigest(m *anthropic.Message) digest {
	var d digest
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			d.Text += b.Text
		case "thinking":
			d.Reasoning += b.Thinking
		case "tool_use":
			d.Tools = append(d.Tools, digestTool{b.Name, normJSON(string(b.Input))})
		}
	}
	switch m.StopReason {
	case "max_tokens":
		d.Finish = "length"
	case "tool_use":
		d.Finish = "tool_calls"
	case "refusal":
		d.Finish = "content_filter"
	case "":
	default:
		d.Finish = "stop"
	}
	d.In = m.Usage.InputTokens + m.Usage.CacheReadInputTokens + m.Usage.CacheCreationInputTokens
	d.Out, d.Cached = m.Usage.OutputTokens, m.Usage.CacheReadInputTokens
	return d
}

// compareDigests checks that the client saw what the upstream said.
func compareDigests(t *testing.T, from, to translate.Protocol, up, got digest) {
	t.Helper()
	if up.Error || got.Error {
		if up.Error != got.Error {
			t.Fatalf("error: upstream %v, translated %v", up.Error, got.Error)
		}
		return
	}
	if from == translate.Chat || to == translate.Chat {
		up.Reasoning, got.Reasoning = "", "" // Chat has no reasoning field in its SDK
	}
	if to == translate.Messages {
		up.Text, up.Refusal = up.Text+up.Refusal, "" // Messages has no refusal: it is text there
	}
	if !reflect.DeepEqual(up, got) {
		t.Fatalf("the client's SDK saw\n%+v\nbut the upstream's SDK saw\n%+v", got, up)
	}
}

func TestSDKStreams(t *testing.T) {
	for _, f := range files(t, "streams") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		up := sdkDigest(t, from, in, true)
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				out := translateStream(t, from, to, in, translate.StreamOptions{IncludeUsage: true})
				got := sdkDigest(t, to, out, true)
				compareDigests(t, from, to, up, got)
			})
		}
	}
}

func TestSDKResponses(t *testing.T) {
	for _, f := range files(t, "responses") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		up := sdkDigest(t, from, in, false)
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				out, err := translate.TranslateResponse(from, to, in, translate.ResponseOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got := sdkDigest(t, to, out, false)
				compareDigests(t, from, to, up, got)
			})
		}
	}
}

// TestSDKErrors checks that the client's SDK reads a translated error body
// as an API error with the status and message.
func TestSDKErrors(t *testing.T) {
	for _, f := range files(t, "errors") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range protocols {
			if to == from {
				continue
			}
			t.Run(name+"/"+to.String(), func(t *testing.T) {
				body := translate.TranslateError(from, to, 429, in)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(429)
					_, _ = w.Write(body)
				}))
				defer srv.Close()
				ctx := sdkCtx(t)
				var msg string
				switch to {
				case translate.Messages:
					c := anthropicClient(srv.URL)
					_, err := c.Messages.New(ctx, anthropicParams)
					var ae *anthropic.Error
					if !asErr(err, &ae) || ae.StatusCode != 429 {
						t.Fatalf("anthropic-sdk-go: %v", err)
					}
					msg = ae.RawJSON()
				default:
					c := openaiClient(srv.URL)
					_, err := c.Chat.Completions.New(ctx, chatParams)
					var oe *openai.Error
					if !asErr(err, &oe) || oe.StatusCode != 429 || oe.Message == "" {
						t.Fatalf("openai-go: %v", err)
					}
					msg = oe.Message
				}
				if !bytes.Contains(body, []byte(strings.SplitN(msg, "\"", 2)[0])) {
					t.Fatalf("message %q not in %s", msg, body)
				}
			})
		}
	}
}

func asErr[T error](err error, target *T) bool {
	if err == nil {
		return false
	}
	return errors.As(err, target)
}

var protocols = []translate.Protocol{translate.Chat, translate.Responses, translate.Messages}

// files lists the shared testdata of package translate.
func files(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("..", "testdata", dir, "*"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no files in ../testdata/%s", dir)
	}
	return m
}

func protocolOf(t *testing.T, name string) translate.Protocol {
	switch {
	case strings.HasPrefix(name, "chat-"):
		return translate.Chat
	case strings.HasPrefix(name, "responses-"):
		return translate.Responses
	case strings.HasPrefix(name, "messages-"):
		return translate.Messages
	}
	t.Fatalf("%s: no protocol prefix", name)
	return 0
}

// translateStream runs a whole upstream stream through a Stream.
func translateStream(t *testing.T, from, to translate.Protocol, in []byte, opts translate.StreamOptions) []byte {
	sc := translate.NewScanner(bytes.NewReader(in), 0)
	st := translate.NewStream(from, to, opts)
	var out []byte
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			return st.Finish(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err = st.Event(out, ev)
		if err != nil {
			t.Fatal(err)
		}
	}
}
