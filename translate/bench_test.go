package translate

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// Stream translation cost per upstream event, for every direction and for
// passthrough (what the gateway does when both sides speak the same
// protocol: scan and forward the raw bytes). Each op is one upstream event;
// a new Stream starts whenever the recorded stream is used up, so stream
// set-up and the terminal events are included, amortised.
//
//	go test ./translate/ -run '^$' -bench 'Stream' -benchtime 20000x

var benchStreams = map[Protocol]string{
	Chat:      "testdata/streams/chat-stream-toolcall.sse",
	Responses: "testdata/streams/responses-stream-toolcall-reasoning.sse",
	Messages:  "testdata/streams/messages-stream-tooluse.sse",
}

// loadEvents reads a stream's events into memory (copied).
func loadEvents(b *testing.B, p Protocol) []Event {
	in, err := os.ReadFile(benchStreams[p])
	if err != nil {
		b.Fatal(err)
	}
	sc := NewScanner(bytes.NewReader(in), 0)
	var evs []Event
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			b.Fatal(err)
		}
		evs = append(evs, Event{Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data)})
	}
}

func BenchmarkStream(b *testing.B) {
	for _, from := range protocols {
		for _, to := range protocols {
			if from == to {
				continue
			}
			b.Run(from.String()+"-to-"+to.String(), func(b *testing.B) {
				evs := loadEvents(b, from)
				out := make([]byte, 0, 64<<10)
				var st *Stream
				i := len(evs)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if i == len(evs) {
						if st != nil {
							out = st.Finish(out[:0])
						}
						st = NewStream(from, to, StreamOptions{IncludeUsage: true, Created: 1})
						i = 0
					}
					var err error
					out, err = st.Event(out[:0], evs[i])
					if err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

func BenchmarkStreamPassthrough(b *testing.B) {
	for _, p := range protocols {
		b.Run(p.String(), func(b *testing.B) {
			in, err := os.ReadFile(benchStreams[p])
			if err != nil {
				b.Fatal(err)
			}
			r := bytes.NewReader(in)
			sc := NewScanner(r, 0)
			out := make([]byte, 0, 64<<10)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, err := sc.Next()
				if err == io.EOF {
					r.Reset(in)
					sc.Reset(r)
					_, err = sc.Next()
				}
				if err != nil {
					b.Fatal(err)
				}
				out = append(out[:0], sc.Raw()...)
			}
		})
	}
}

// Request translation of real clients' bodies (Codex CLI 0.169.0, 44 KB
// with its tools; Claude Code 2.1.328, 53 KB; openai-node, 1 KB).
//
//	go test ./translate/ -run '^$' -bench 'TranslateRequest' -benchtime 200x
func BenchmarkTranslateRequest(b *testing.B) {
	for _, c := range []struct {
		from Protocol
		file string
	}{
		{Responses, "testdata/requests/responses-client-codex-cli-http-tool-02.json"},
		{Messages, "testdata/requests/messages-client-claude-code-tool-02.json"},
		{Chat, "testdata/requests/chat-client-openai-node-chat-nonstream-tools-02.json"},
	} {
		body, err := os.ReadFile(c.file)
		if err != nil {
			b.Fatal(err)
		}
		for _, to := range protocols {
			if to == c.from {
				continue
			}
			b.Run(c.from.String()+"-to-"+to.String(), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for range b.N {
					if _, err := TranslateRequest(c.from, to, body, RequestOptions{Model: "m"}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
