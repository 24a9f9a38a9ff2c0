package upstream

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
)

// answerBySeparateReads is how the gateway read a non-stream answer before
// ReadAnswer, the reference it must match: ClassifyBody, then, for an
// answer that is no error, translate.BodyUsage and (Responses) the id by
// its own gjson path.
func answerBySeparateReads(ep translate.Protocol, body []byte) Answer {
	var a Answer
	if a.Verdict, a.Msg, a.IsError = ClassifyBody(ep, body); a.IsError {
		return a
	}
	a.Usage, a.HasUsage = translate.BodyUsage(ep, body)
	return a
}

// checkReadAnswer fails t when ReadAnswer of body differs from the
// separate reads for any client protocol.
func checkReadAnswer(t *testing.T, body []byte) {
	t.Helper()
	for _, ep := range []translate.Protocol{translate.Chat, translate.Responses, translate.Messages} {
		got := ReadAnswer(ep, body)
		want := answerBySeparateReads(ep, body)
		wantID := ""
		if ep == translate.Responses && !want.IsError {
			wantID = gjson.GetBytes(body, "id").String()
		}
		gotID := got.ResponseID()
		if got.Verdict != want.Verdict || got.Msg != want.Msg || got.IsError != want.IsError ||
			got.Usage != want.Usage || got.HasUsage != want.HasUsage || gotID != wantID {
			t.Fatalf("%v answer %q:\none pass   %+v id %q\nseparately %+v id %q", ep, body, got, gotID, want, wantID)
		}
	}
}

// ReadAnswer reads what the separate readers read on the upstreams'
// captured answers, successes and errors.
func TestReadAnswerMatchesSeparateReads(t *testing.T) {
	for _, name := range answerSeeds {
		checkReadAnswer(t, testdata(t, name))
	}
	for _, body := range answerSeedBodies {
		checkReadAnswer(t, []byte(body))
	}
}

// ReadAnswer's message and id are the caller's to keep: the body's buffer
// is pooled and reused once the answer is passed on.
func TestReadAnswerOwnsItsStrings(t *testing.T) {
	body := []byte(`{"id":"resp_1","status":"completed","usage":{"input_tokens":1}}`)
	a := ReadAnswer(translate.Responses, body)
	id := a.ResponseID()
	failed := []byte(`{"error":{"message":"boom"}}`)
	e := ReadAnswer(translate.Chat, failed)
	clear(body)
	clear(failed)
	if id != "resp_1" || e.Msg != "boom" || !e.IsError {
		t.Fatalf("after the bodies were overwritten: id %q, message %q (%v); want resp_1, boom", id, e.Msg, e.IsError)
	}
}

var answerSeeds = []string{
	"messages-nonstream-text.response.json", "messages-nonstream-tooluse.response.json",
	"errors/anthropic-messages/error-400.json", "errors/anthropic-messages/error-429.json",
	"errors/openai-chat/error-429-insufficient-quota.json", "errors/openai-chat/error-429-rate-limit.json",
	"errors/openai-responses/error-400.json", "errors/codex-backend/error-429-usage-limit.json",
}

var answerSeedBodies = []string{
	`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`,
	`{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":9,"output_tokens":3,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":2}}}`,
	`{"id":"resp_2","status":"failed","error":{"code":"rate_limit_exceeded","message":"Please try again in 1.5s."},"usage":{"input_tokens":1}}`,
	`{"status":"completed","status":"failed","error":1,"error":{"type":"server_error"},"id":7,"id":"x","usage":null,"usage":{"input_tokens":2}}`,
	`{"type":"message","type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}`,
	`{"error":{"message":"m","type":"insufficient_quota","code":"insufficient_quota"},"usage":{"prompt_tokens":1}}`,
	`{"\u0065rror":{"message":"escaped key"},"us\u0061ge":{"prompt_tokens":3},"i\u0064":"resp_esc"}`,
	`[{"error":{"message":"not an object"}}]`, `"error"`, `null`, `{}`, `{"id":{"nested":true},"usage":[]}`,
}

// FuzzReadAnswer checks ReadAnswer's one pass against the separate
// readers it replaced (ClassifyBody, translate.BodyUsage, the id's path)
// on every input that is one JSON text (what the gateway passes it, having
// validated the answer); on other input it must only not panic. Its seed
// corpus is the captured answers above and testdata/fuzz/FuzzReadAnswer.
func FuzzReadAnswer(f *testing.F) {
	for _, name := range answerSeeds {
		f.Add(testdata(f, name))
	}
	for _, body := range answerSeedBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) {
			for _, ep := range []translate.Protocol{translate.Chat, translate.Responses, translate.Messages} {
				_ = ReadAnswer(ep, body)
			}
			return
		}
		checkReadAnswer(t, body)
	})
}

// BenchmarkReadAnswer is the read of the benchmarks' Chat answer
// (gateway's BenchmarkChatRequest), one pass against the separate reads
// the gateway made before.
func BenchmarkReadAnswer(b *testing.B) {
	body := []byte(answerSeedBodies[0])
	b.Run("ReadAnswer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if a := ReadAnswer(translate.Chat, body); a.IsError || !a.HasUsage {
				b.Fatal("not read")
			}
		}
	})
	b.Run("separate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if a := answerBySeparateReads(translate.Chat, body); a.IsError || !a.HasUsage {
				b.Fatal("not read")
			}
		}
	})
}
