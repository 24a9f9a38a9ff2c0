package gateway

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// checkOutputMembers fails t when outputMembers of data differs from the
// two gjson paths it replaced, for both keys respOutput reads.
func checkOutputMembers(t *testing.T, data []byte) {
	t.Helper()
	for _, key := range []string{"item", "delta"} {
		i, v := outputMembers(data, key)
		wi, wv := gjson.GetBytes(data, "output_index"), gjson.GetBytes(data, key)
		if i.Raw != wi.Raw || i.Type != wi.Type || v.Raw != wv.Raw || v.Type != wv.Type || v.Str != wv.Str {
			t.Fatalf("%q in %q: one pass %q %q, paths %q %q", key, data, i.Raw, v.Raw, wi.Raw, wv.Raw)
		}
	}
}

// checkDeltaMembers fails t when deltaMembers reads data (any bytes)
// and what it reads differs from outputMembers(data, "delta"), or its
// delta from deltaOf's (the output estimate's read before it).
func checkDeltaMembers(t *testing.T, data []byte) {
	t.Helper()
	i, d, ok := deltaMembers(data)
	if !ok {
		return
	}
	wi, wd := outputMembers(data, "delta")
	if i.Raw != wi.Raw || i.Type != wi.Type || i.Int() != wi.Int() || d.Raw != wd.Raw || d.Type != wd.Type || d.Str != wd.Str {
		t.Fatalf("%q: deltaMembers %q %q (%d %q), outputMembers %q %q (%d %q)", data, i.Raw, d.Raw, i.Int(), d.Str, wi.Raw, wd.Raw, wi.Int(), wd.Str)
	}
	if v := deltaOf(data); v.Type != d.Type || v.Raw != d.Raw { // countEvent's read
		t.Fatalf("%q: deltaMembers' delta %q, deltaOf's %q", data, d.Raw, v.Raw)
	}
}

// deltaMembersSeeds are delta events in OpenAI's shape and near it.
var deltaMembersSeeds = []string{
	`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello","logprobs":[]}`,
	`{"type":"response.function_call_arguments.delta","sequence_number":7,"item_id":"fc_1","output_index":0,"delta":"{\"a\":1}"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":007,"delta":"a\\"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":2,"delta":"a\\\"b"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":2,"delta":"\u00e9\n"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":2,"delta":"cut`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":2,"delta":"a"x`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":1234567890123456,"delta":"a"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":-1,"delta":"a"}`,
	`{"type":"x","sequence_number":1,"item_id":"i\"","output_index":1,"delta":"a"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":1,"content_index":,"delta":"a"}`,
	`{"type":"x","sequence_number":1,"item_id":"i","output_index":1,"delta":5}`,
}

// TestDeltaMembers: deltaMembers reads the captured stream's delta events
// and the seeds as outputMembers does.
func TestDeltaMembers(t *testing.T) {
	body, err := os.ReadFile("testdata/responses-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, data := range responsesEventData(t, body) {
		if _, _, ok := deltaMembers(data); ok {
			read++
		}
		checkDeltaMembers(t, data)
	}
	if read != 4 {
		t.Errorf("%d delta events read directly, want the stream's 4", read)
	}
	for _, s := range deltaMembersSeeds {
		checkDeltaMembers(t, []byte(s))
	}
	if _, d, ok := deltaMembers([]byte(deltaMembersSeeds[1])); !ok || d.Str != `{"a":1}` {
		t.Errorf("escaped delta: %q %v", d.Str, ok)
	}
}

// outputMembersSeeds are event data outputMembers is checked on besides
// the captured stream's.
var outputMembersSeeds = []string{
	`{"type":"response.output_text.delta","output_index":1,"delta":"a","output_index":2,"delta":"b"}`,
	`{"delta":"first","item":{"x":1},"output_index":0}`,
	`{"output_\u0069ndex":3,"d\u0065lta":"esc"}`,
	`{"output_index":"1","delta":{"text":"nested"}}`,
	`["output_index",0]`, `"delta"`, `{}`, `{"output_index":0,"delta":"cut`, // the last is no JSON
}

// outputMembers reads what the two paths read, on every event of the
// captured Responses stream and on repeated, escaped and odd members (of
// valid JSON: FuzzOutputMembers).
func TestOutputMembersMatchPaths(t *testing.T) {
	body, err := os.ReadFile("testdata/responses-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range responsesEventData(t, body) {
		checkOutputMembers(t, data)
	}
	for _, s := range outputMembersSeeds {
		if gjson.Valid(s) {
			checkOutputMembers(t, []byte(s))
		}
	}
}

// FuzzOutputMembers checks outputMembers against the two gjson paths on
// every input that is one JSON text; on other input it must only not
// panic: there gjson's paths and its ForEach skip malformed bytes each
// their own way (`{""""output_index"00`: the path finds 00, the pass
// nothing), and an upstream event that is no JSON has no output to keep.
func FuzzOutputMembers(f *testing.F) {
	for _, s := range outputMembersSeeds {
		f.Add([]byte(s))
	}
	for _, s := range deltaMembersSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{""""output_index"00`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDeltaMembers(t, data)
		if !gjson.ValidBytes(data) {
			outputMembers(data, "item")
			outputMembers(data, "delta")
			return
		}
		checkOutputMembers(t, data)
	})
}

// responsesEventData returns the data of every event of an SSE body.
func responsesEventData(t testing.TB, body []byte) [][]byte {
	t.Helper()
	sc := translate.NewScanner(bytes.NewReader(body), 1<<20)
	var out [][]byte
	for {
		ev, err := sc.Next()
		if err != nil {
			return out
		}
		out = append(out, append([]byte(nil), ev.Data...))
	}
}

// BenchmarkRespOutputObserve is respOutput.observe over the captured
// Responses stream's events (two items, four text deltas), what a
// passthrough Responses stream does for its response.failed.
func BenchmarkRespOutputObserve(b *testing.B) {
	body := readBench(b, "testdata/responses-stream-text.sse")
	sc := translate.NewScanner(bytes.NewReader(body), 1<<20)
	type event struct {
		name string
		data []byte
	}
	var evs []event
	for {
		ev, err := sc.Next()
		if err != nil {
			break
		}
		evs = append(evs, event{string(ev.Name), append([]byte(nil), ev.Data...)})
	}
	b.ReportAllocs()
	for b.Loop() {
		var o respOutput
		for _, ev := range evs {
			o.observe(ev.name, ev.data)
		}
		if len(o.items) != 2 {
			b.Fatalf("%d items", len(o.items))
		}
	}
}

// BenchmarkResponsesObserve is stream.observe over the captured Responses
// stream's events (14: created, in_progress, two items, four text deltas,
// completed), what a relayed Responses stream does for every event: passed
// through to a Responses client (passthrough, the output kept for a
// response.failed), or translated for a Messages client (messages: observe
// alone, the translation not run).
//
//	go test -run '^$' -bench ResponsesObserve -benchmem ./gateway/
func BenchmarkResponsesObserve(b *testing.B) {
	body := readBench(b, "testdata/responses-stream-text.sse")
	sc := translate.NewScanner(bytes.NewReader(body), 1<<20)
	var evs []translate.Event
	for {
		ev, err := sc.Next()
		if err != nil {
			break
		}
		evs = append(evs, translate.Event{Name: append([]byte(nil), ev.Name...), Data: append([]byte(nil), ev.Data...)})
	}
	s := &Server{now: time.Now}
	lease := &actors.Lease{Provider: storage.ProviderOpenAI}
	for _, ep := range []translate.Protocol{translate.Responses, translate.Messages} {
		name := "passthrough"
		if ep == translate.Messages {
			name = "messages"
		}
		b.Run(name, func(b *testing.B) {
			c := &call{key: &noKey, endpoint: ep}
			var tr streamTranslator
			if ep != translate.Responses {
				tr = newStreamTranslator(c, translate.Responses)
			}
			b.ReportAllocs()
			for b.Loop() {
				st := stream{s: s, c: c, up: translate.Responses, lease: lease, start: time.Now()}
				if ep != translate.Responses {
					st.tr = tr // observe only tests it for nil
				}
				for _, ev := range evs {
					st.observe(ev)
				}
				if !st.usageFinal || !st.clean {
					b.Fatal("usage or end not seen")
				}
			}
		})
	}
}
