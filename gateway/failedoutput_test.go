package gateway

import (
	"bytes"
	"testing"

	"github.com/tidwall/gjson"
)

// TestBrokenResponsesStreamFailsWithItsOutput: a Responses stream relayed
// as it came that breaks after text was streamed ends with a
// response.failed whose response lists the output produced so far, as the
// API's own response object does (the response is "the complete
// response" of the stream, shared fixture
// openai-responses/stream-response-failed.sse): the items done as they
// were, and the one cut short with its text so far, status incomplete.
// Before, its output was [] although the client had the text.
func TestBrokenResponsesStreamFailsWithItsOutput(t *testing.T) {
	broken := []byte("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_abc\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"in_progress\",\"call_id\":\"call_1\",\"name\":\"f\",\"arguments\":\"\"}}\n\n" +
		"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\",\"call_id\":\"call_1\",\"name\":\"f\",\"arguments\":\"{}\"}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":3,\"output_index\":1,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
		"event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":4,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"text\":\"\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":5,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"delta\":\"Hello, \"}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":6,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"delta\":\"wor\"}\n\n")
	s, sys, key := testServer(t, 1, sse(broken))
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true}`))
	body := resp.Body()
	i := bytes.Index(body, []byte("event: response.failed\ndata: "))
	if i < 0 {
		t.Fatalf("no response.failed: %s", body)
	}
	data := body[i+len("event: response.failed\ndata: "):]
	data = data[:bytes.IndexByte(data, '\n')]
	out := gjson.GetBytes(data, "response.output")
	if n := len(out.Array()); n != 2 {
		t.Fatalf("response.failed output %s, want the two items produced", out.Raw)
	}
	if fc := out.Get("0"); fc.Get("id").Str != "fc_1" || fc.Get("status").Str != "completed" || fc.Get("arguments").Str != "{}" {
		t.Errorf("done item %s, want it as its output_item.done gave it", fc.Raw)
	}
	msg := out.Get("1")
	if msg.Get("id").Str != "msg_1" || msg.Get("status").Str != "incomplete" || msg.Get("content.0.type").Str != "output_text" || msg.Get("content.0.text").Str != "Hello, wor" {
		t.Errorf("cut item %s, want msg_1 incomplete with the text streamed", msg.Raw)
	}
	if gjson.GetBytes(data, "response.status").Str != "failed" || gjson.GetBytes(data, "response.id").Str != "resp_abc" {
		t.Errorf("response.failed %s", data)
	}
	waitIdle(t, sys)
}
