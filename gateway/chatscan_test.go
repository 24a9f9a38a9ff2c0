package gateway

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// searchedMarks is what the relay's separate searches found in a Chat
// chunk before scanChat: each mark a bytes.Contains (delta deltaOf's
// bytes.Index) of its whole string.
func searchedMarks(data []byte) chatMarks {
	return chatMarks{
		usage:     bytes.Contains(data, []byte(`"usage"`)),
		usageObj:  bytes.Contains(data, []byte(`"usage":{`)),
		noChoices: bytes.Contains(data, []byte(`"choices":[]`)),
		finish:    bytes.Contains(data, []byte(`"finish_reason":"`)),
		err:       bytes.Contains(data, []byte(`"error"`)),
		delta:     bytes.Index(data, []byte(`"delta":`)),
	}
}

// chatScanSeeds are chunks whose strings overlap, sit at either end, are
// cut short or repeat.
var chatScanSeeds = []string{
	``, `"`, `""`, `"usage"`, `"usage":{`, `"usage":`, `""usage":{}`, `"usage""usage":{`,
	`{"choices":[],"usage":{"prompt_tokens":1}}`, `{"choices":[ ],"usage": {}}`,
	`{"finish_reason":"stop"}`, `{"finish_reason":null}`, `"finish_reason":"`,
	`{"error":{"message":"x"}}`, `{"x":"\"error\""}`, `"error`, `"delta":"delta":`,
	`{"a":"\"delta\":"}`, `"d"e"f"u"c`, `{"delta":{"content":"\"usage\":{"}}`,
	`[DONE]`, `{"usage":null}`, `{"usage":null,"usage":{"a":1}}`, `{"us\u0061ge":{"prompt_tokens":2},"x":"usage":null}`,
	`{"usage" :{"prompt_tokens":3}}`, `{"usage":nul}`, `{"usage":null{"prompt_tokens":4}}`, `{"a":"\"usage\":null","usage":{"total_tokens":5}}`,
}

// checkChatScan fails t when scanChat and the separate searches disagree
// on data, or when the usage and the output estimate read through the
// marks differ from AddEvent's and countEvent's.
func checkChatScan(t *testing.T, data []byte) {
	t.Helper()
	got, want := scanChat(data), searchedMarks(data)
	want.usageRead = got.usageRead // checked below, by the usage read through it
	if got.usageRead && !got.usage {
		t.Fatalf("scanChat(%q): usage to read where there is none", data)
	}
	if got != want {
		t.Fatalf("scanChat(%q) = %+v, the searches %+v", data, got, want)
	}
	if got.usageChunk() != isUsageChunk(data) {
		t.Fatalf("usageChunk(%q) = %v, isUsageChunk %v", data, got.usageChunk(), isUsageChunk(data))
	}
	var u1, u2 translate.Usage
	ok1 := u1.AddEvent(translate.Chat, nil, data)
	ok2 := got.usageRead && u2.AddChatUsage(data)
	if ok1 != ok2 || u1 != u2 {
		t.Fatalf("usage of %q: AddEvent %v %+v, through the marks %v %+v", data, ok1, u1, ok2, u2)
	}
	var n1, n2 contentCount
	n1.countEvent(translate.Chat, translate.Event{Data: data})
	n2.countChatDelta(data, got.delta)
	if n1 != n2 {
		t.Fatalf("output estimate of %q: countEvent %+v, countChatDelta %+v", data, n1, n2)
	}
}

// TestScanChat: scanChat finds what the separate searches found, in every
// event of the captured Chat streams and in the seeds.
func TestScanChat(t *testing.T) {
	for _, path := range []string{"testdata/chat-stream-text.sse", "testdata/chat-stream-usage-mock.sse"} {
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range responsesEventData(t, body) {
			checkChatScan(t, data)
		}
	}
	for _, s := range chatScanSeeds {
		checkChatScan(t, []byte(s))
	}
}

// TestScanChatOffsets: scanChat finds what the separate searches found
// with each seed at every offset within an eight-byte step and cut at
// every length, so that its strings straddle the steps and end in the
// last, partial one.
func TestScanChatOffsets(t *testing.T) {
	for _, s := range chatScanSeeds {
		for pad := range 8 {
			data := append(bytes.Repeat([]byte{'x'}, pad), s...)
			for n := range len(data) + 1 {
				checkChatScan(t, data[:n])
			}
		}
	}
}

// TestQuotesIn: quotesIn (backslashesIn) marks exactly the bytes that are
// quotes (backslashes), for every byte value at every position, next to
// them and not.
func TestQuotesIn(t *testing.T) {
	for _, f := range []struct {
		name string
		in   func(uint64) uint64
		c    byte
	}{{"quotesIn", quotesIn, '"'}, {"backslashesIn", backslashesIn, '\\'}} {
		for pos := range 8 {
			for v := range 256 {
				for _, fill := range []byte{0, 'a', f.c, 0xff, f.c ^ 0x80, f.c + 1} {
					var b [8]byte
					for i := range b {
						b[i] = fill
					}
					b[pos] = byte(v)
					var want uint64
					for i, c := range b {
						if c == f.c {
							want |= 0x80 << (8 * i)
						}
					}
					if got := f.in(binary.LittleEndian.Uint64(b[:])); got != want {
						t.Fatalf("%s(% x) = %#x, want %#x", f.name, b, got, want)
					}
				}
			}
		}
	}
}

// TestPrefixWord: a prefixWord matches the word8 of bytes exactly when
// they begin with the string's first eight bytes, for each string mark
// compares, cut at every length and followed by other bytes.
func TestPrefixWord(t *testing.T) {
	for _, s := range [][]byte{scanUsage, scanUsageObj, scanChoices, scanFinish, scanError, scanDeltaRest} {
		p, head := newPrefixWord(s), s[:min(len(s), 8)]
		for n := range len(s) + 1 {
			for _, tail := range []string{"", "x", "\x00", "12345678"} {
				b := append(append([]byte(nil), s[:n]...), tail...)
				if got, want := p.in(word8(b)), bytes.HasPrefix(b, head); got != want {
					t.Errorf("%q in word8(%q) = %v, want %v", head, b, got, want)
				}
			}
		}
	}
}

// FuzzScanChat checks scanChat against the separate searches (and the
// usage and estimate read through its marks) on any bytes: the searches
// ask for bytes, not JSON, and so does the pass.
func FuzzScanChat(f *testing.F) {
	for _, s := range chatScanSeeds {
		f.Add([]byte(s))
	}
	for _, path := range []string{"testdata/chat-stream-text.sse", "testdata/chat-stream-usage-mock.sse"} {
		body, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkChatScan(t, data) })
}

// TestObserveChatMarks: a relayed Chat stream from the mock (a "usage":null
// on every chunk, the usage chunk with "choices":[] last, then [DONE]) is
// observed as before the one pass: the usage taken from its last chunk,
// the stream clean, the usage chunk the only one dropped, no failure.
func TestObserveChatMarks(t *testing.T) {
	st := &stream{s: &Server{now: time.Now}, c: &call{key: &noKey}, up: translate.Chat, lease: &actors.Lease{Provider: storage.ProviderOpenAI}, start: time.Now()}
	dropped := 0
	body, err := os.ReadFile("testdata/chat-stream-usage-mock.sse")
	if err != nil {
		t.Fatal(err)
	}
	events := responsesEventData(t, body)
	for _, data := range events {
		ev := translate.Event{Data: data}
		if st.usageChunk(ev, st.observe(ev)) {
			dropped++
		}
	}
	if want := (translate.Usage{InputTokens: 30, OutputTokens: 12}); st.usage != want || !st.usageFinal {
		t.Errorf("usage %+v (final %v), want %+v", st.usage, st.usageFinal, want)
	}
	if !st.clean || st.failed.Class != 0 || st.ttft == 0 || int(st.events.Load()) != len(events) {
		t.Errorf("clean %v, failed %+v, ttft %v, events %d of %d", st.clean, st.failed, st.ttft, st.events.Load(), len(events))
	}
	if dropped != 1 {
		t.Errorf("%d chunks taken for the usage chunk, want 1", dropped)
	}
	if st.content == (contentCount{}) {
		t.Error("no output counted for the estimate")
	}
}

// BenchmarkChatObserve is stream.observe and the relay's usage-chunk test
// over the events of the mock's Chat stream (troupe mock --scenario peers:
// 15 chunks, each with "usage":null but the last, then [DONE]), what a
// relayed Chat stream does for every event.
//
//	go test -run '^$' -bench ChatObserve -benchmem ./gateway/
func BenchmarkChatObserve(b *testing.B) {
	events := responsesEventData(b, readBench(b, "testdata/chat-stream-usage-mock.sse"))
	s := &Server{now: time.Now}
	lease := &actors.Lease{Provider: storage.ProviderOpenAI}
	c := &call{key: &noKey}
	b.ReportAllocs()
	for b.Loop() {
		st := stream{s: s, c: c, up: translate.Chat, lease: lease, start: time.Now(), dropUsage: true}
		for _, data := range events {
			ev := translate.Event{Data: data}
			if st.dropUsage && st.usageChunk(ev, st.observe(ev)) {
				continue
			}
		}
		if !st.usageFinal || !st.clean {
			b.Fatal("usage or end not seen")
		}
	}
}
