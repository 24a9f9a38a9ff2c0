package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"testing/iotest"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// oneByteSSE answers every request with body, given to the reader one byte
// per Read: the gateway never has a next event in hand, so it writes each
// event on its own, as it did before it gathered them.
type oneByteSSE struct{ body []byte }

func (o oneByteSSE) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &upstream.Response{Status: 200, Header: h, Body: io.NopCloser(iotest.OneByteReader(bytes.NewReader(o.body)))}, nil
}

// writeOutCounted is writeOut that also counts the flushes of the server's
// buffered writer (one per chunk of a stream, and the end; the buffer is
// large enough that nothing else reaches the connection).
func writeOutCounted(ctx *fasthttp.RequestCtx) (*fasthttp.Response, int) {
	var buf bytes.Buffer
	cw := &countingWriter{w: &buf}
	w := bufio.NewWriterSize(cw, 1<<20)
	ctx.Response.Write(w) // drives a stream's WriteTo and Close, as the server would
	w.Flush()
	resp := &fasthttp.Response{}
	resp.Read(bufio.NewReader(&buf))
	return resp, cw.writes
}

type countingWriter struct {
	w      io.Writer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.w.Write(p)
}

// created masks the creation times a translator takes from the clock when
// the upstream sent none (a Messages upstream), so two runs compare.
var created = regexp.MustCompile(`"created(_at)?":\d+`)

// TestGatheredStreamsAreByteIdentical: a stream whose events all arrive in
// one read is written in a few writes instead of one per event, and the
// client gets the same bytes as when every event is written on its own
// (the upstream giving one byte per read), passed through or translated
// between every pair of protocols.
func TestGatheredStreamsAreByteIdentical(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider storage.Provider
		path     string
		file     string
		body     string
	}{
		{"chat passthrough", storage.ProviderOpenAI, "/v1/chat/completions", "chat-stream-text.sse", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"responses passthrough", storage.ProviderOpenAI, "/v1/responses", "responses-stream-text.sse", `{"model":"m","stream":true,"input":"hi"}`},
		{"messages passthrough", storage.ProviderAnthropic, "/v1/messages", "messages-stream-tooluse.sse", `{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"responses to messages", storage.ProviderOpenAI, "/v1/messages", "responses-stream-text.sse", `{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"chat to responses", storage.ProviderOpenAICompat, "/v1/responses", "chat-stream-text.sse", `{"model":"m","stream":true,"input":"hi"}`},
		{"chat to messages", storage.ProviderOpenAICompat, "/v1/messages", "chat-stream-text.sse", `{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"messages to chat", storage.ProviderAnthropic, "/v1/chat/completions", "messages-stream-text.sse", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"messages to responses", storage.ProviderAnthropic, "/v1/responses", "messages-stream-tooluse.sse", `{"model":"m","stream":true,"input":"hi"}`},
		{"responses to chat", storage.ProviderCodex, "/v1/chat/completions", "responses-stream-text.sse", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := readFile(t, tc.file)
			run := func(tr upstream.Transport) ([]byte, int) {
				s, sys, key := testServerOf(t, tr, tc.provider)
				var ctx fasthttp.RequestCtx
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetRequestURI(tc.path)
				ctx.Request.Header.Set("Authorization", "Bearer "+key)
				ctx.Request.Header.Set("x-api-key", key)
				ctx.Request.Header.Set("anthropic-version", "2023-06-01")
				ctx.Request.SetBody([]byte(tc.body))
				s.handle(&ctx)
				resp, writes := writeOutCounted(&ctx)
				if resp.StatusCode() != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
				}
				waitIdle(t, sys)
				return created.ReplaceAll(resp.Body(), []byte(`"created$1":0`)), writes
			}
			gathered, few := run(sse(up))
			single, many := run(oneByteSSE{up})
			if !bytes.Equal(gathered, single) {
				t.Fatalf("gathered stream differs from the one written event by event:\n%s\n---\n%s", gathered, single)
			}
			if tc.file == "chat-stream-text.sse" && tc.provider == storage.ProviderOpenAI && !bytes.Equal(gathered, created.ReplaceAll(up, []byte(`"created$1":0`))) {
				t.Fatalf("passthrough differs from the upstream's bytes:\n%s", gathered)
			}
			// Head and events in one write, the body's end in another; one
			// more for each time the scanner's 4 KiB buffer was refilled
			// (it cannot know that the next read would not wait).
			if most := 2 + len(up)/4096; few > most || many <= few {
				t.Fatalf("%d writes gathered, %d event by event; want at most %d, and fewer", few, many, most)
			}
			t.Logf("%d writes gathered, %d event by event", few, many)
		})
	}
}

// chanBody is an upstream answer body fed by a test: each slice received
// on ch is what one Read returns; a closed ch ends the body.
type chanBody struct {
	ctx  context.Context
	ch   <-chan []byte
	left []byte
}

func (b *chanBody) Read(p []byte) (int, error) {
	if len(b.left) == 0 {
		select {
		case next, ok := <-b.ch:
			if !ok {
				return 0, io.EOF
			}
			b.left = next
		case <-b.ctx.Done():
			return 0, &upstream.Error{Kind: upstream.KindCanceled, Err: b.ctx.Err()}
		}
	}
	n := copy(p, b.left)
	b.left = b.left[n:]
	return n, nil
}

func (b *chanBody) Close() error { return nil }

// chanSSE is an upstream whose one answer is fed through ch.
type chanSSE struct{ ch chan []byte }

func (c chanSSE) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &upstream.Response{Status: 200, Header: h, Body: &chanBody{ctx: ctx, ch: c.ch}}, nil
}

func chatChunk(content string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
}

// readSSEUntil reads from br, appending to got, until got[from:] holds want
// (the read deadline of dialTCP fails a test that waits for ever), and
// returns got.
func readSSEUntil(t *testing.T, br *bufio.Reader, got []byte, from int, want string) []byte {
	t.Helper()
	for !bytes.Contains(got[from:], []byte(want)) {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("waiting for %q: %v after %d bytes ending %q", want, err, len(got), got[max(0, len(got)-300):])
		}
		got = append(got, b)
	}
	return got
}

// TestEventWrittenBeforeUpstreamWait: an event the gateway has is written
// before it waits for the upstream's next, even when part of that next
// event came in the same read; the client gets it while the upstream is
// still silent. During the silence the heartbeat still comes, and the
// client's bytes are the upstream's.
func TestEventWrittenBeforeUpstreamWait(t *testing.T) {
	ch := make(chan []byte)
	s, sys, key := testServerCfg(t, 1, chanSSE{ch}, Config{MaxWait: 100 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	ln := serveTCP(t, s)
	conn := dialTCP(t, ln)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	br := bufio.NewReader(conn)

	beta := chatChunk("beta")
	ch <- []byte(chatChunk("alpha") + beta[:20]) // alpha whole, the start of beta
	got := readSSEUntil(t, br, nil, 0, "alpha")  // no more comes from the upstream until alpha is through
	if bytes.Contains(got, []byte("beta")) {
		t.Fatalf("beta before the upstream finished it: %q", got)
	}
	// Silence: the heartbeat keeps the connection alive.
	got = readSSEUntil(t, br, got, len(got), string(heartbeat))
	ch <- []byte(beta[20:] + chatChunk("gamma"))
	got = readSSEUntil(t, br, got, 0, "gamma")
	ch <- []byte("data: [DONE]\n\n")
	close(ch)
	got = readSSEUntil(t, br, got, 0, "\r\n0\r\n\r\n")
	// The events, without the chunk framing and heartbeats, are the upstream's.
	resp := &fasthttp.Response{}
	if err := resp.Read(bufio.NewReader(bytes.NewReader(got))); err != nil {
		t.Fatal(err)
	}
	events := bytes.ReplaceAll(resp.Body(), heartbeat, nil)
	want := chatChunk("alpha") + beta + chatChunk("gamma") + "data: [DONE]\n\n"
	if string(events) != want {
		t.Fatalf("client got\n%q\nwant\n%q", events, want)
	}
	waitIdle(t, sys)
}
