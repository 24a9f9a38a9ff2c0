package gateway

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/translate"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "responses-websocket", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCreateFrameFixtures(t *testing.T) {
	for _, tc := range []struct {
		file     string
		model    string
		prev     string
		warmup   bool
		minItems int64
	}{
		{"client.response.create.json", "gpt-5.4", "", false, 1},
		{"client.response.create.warmup.json", "gpt-5.4", "", true, 1},
		{"client.response.create.continuation.json", "gpt-5.4", "resp-1", false, 1},
		{"client.response.create.openai-api.json", "gpt-5.2", "", false, 1},
		{"codex-cli.prewarm.json", "gpt-capture", "", true, 1},
		{"codex-cli.continuation.json", "gpt-capture", "resp_8b9c036f45c34e628ace7f6f", false, 3},
		{"codex-cli.tool-output.json", "gpt-capture", "", false, 1},
		{"openai-node.create.json", "gpt-capture", "", false, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, aerr := parseCreateFrame(readFixture(t, tc.file))
			if aerr != nil {
				t.Fatalf("refused: %v", aerr)
			}
			if f.model != tc.model || f.warmup != tc.warmup || (tc.prev != "" && f.prevResp != tc.prev) {
				t.Fatalf("model %q warmup %v prev %q", f.model, f.warmup, f.prevResp)
			}
			if gjson.GetBytes(f.body, "type").Exists() || gjson.GetBytes(f.body, "generate").Exists() || !gjson.ValidBytes(f.body) {
				t.Fatalf("body keeps type/generate or is invalid: %.200s", f.body)
			}
			if n := gjson.GetBytes(f.input, "#").Int(); !gjson.GetBytes(f.input, "@this").IsArray() || n < tc.minItems {
				t.Fatalf("input %.200s: %d items", f.input, n)
			}
		})
	}
}

func TestParseCreateFrameRefusals(t *testing.T) {
	for frame, code := range map[string]string{
		`not json`:                              "invalid_json",
		`[]`:                                    "invalid_json",
		`{"type":"response.create"}`:            "missing_required_parameter",
		`{"type":"response.create","model":1}`:  "invalid_type",
		`{"model":"m"}`:                         "invalid_type",
		`{"type":"session.update","model":"m"}`: "unsupported_event_type",
		`{"type":"response.create","type":"x","model":"m"}`:               "invalid_type",
		`{"type":"response.create","model":"m","input":5}`:                "invalid_type",
		`{"type":"response.create","model":"m","generate":"no"}`:          "invalid_type",
		`{"type":"response.create","model":"m","previous_response_id":1}`: "invalid_type",
		string(readFixture(t, "client.response.append.legacy-v1.json")):   "unsupported_event_type",
	} {
		_, aerr := parseCreateFrame([]byte(frame))
		if aerr == nil || aerr.Status != 400 || aerr.Code != code {
			t.Errorf("%.60s: %+v, want 400 %s", frame, aerr, code)
		}
	}
}

// FuzzParseCreateFrame: no frame panics the parser; an accepted frame gives
// a JSON object body without "type" or "generate", a model, and an input
// that is a JSON array; a refusal is a 400 in OpenAI's shape.
func FuzzParseCreateFrame(f *testing.F) {
	for _, name := range []string{"client.response.create.json", "client.response.create.warmup.json", "client.response.create.continuation.json",
		"client.response.create.openai-api.json", "client.response.append.legacy-v1.json", "openai-node.create.json"} {
		f.Add(readFixture(f, name))
	}
	for _, s := range []string{`{}`, `{"type":"response.create","model":"m","input":"x"}`, `{"type":"response.create","model":"m","input":[{"a":1}],"generate":false}`, "{\"type\":\"response.create\",\"model\":\"\xff\"}", `{"type":"response.create","model":"m","input":[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		cf, aerr := parseCreateFrame(frame)
		if aerr != nil {
			if aerr.Status != 400 || aerr.Type == "" || aerr.Message == "" {
				t.Fatalf("refusal %+v", aerr)
			}
			return
		}
		if !json.Valid(cf.body) || !gjson.ParseBytes(cf.body).IsObject() || gjson.GetBytes(cf.body, "type").Exists() || gjson.GetBytes(cf.body, "generate").Exists() {
			t.Fatalf("body %q from %q", cf.body, frame)
		}
		if cf.model == "" || !json.Valid(cf.input) || !gjson.ParseBytes(cf.input).IsArray() {
			t.Fatalf("model %q input %q from %q", cf.model, cf.input, frame)
		}
		joined := appendItems(append([]byte(nil), cf.input...), cf.input)
		if !json.Valid(joined) || gjson.GetBytes(joined, "#").Int() != 2*gjson.GetBytes(cf.input, "#").Int() {
			t.Fatalf("appendItems(%q, itself) = %q", cf.input, joined)
		}
	})
}

func TestAppendItems(t *testing.T) {
	for _, tc := range [][3]string{
		{`[]`, `[]`, `[]`},
		{`[1]`, `[]`, `[1]`},
		{`[]`, `[2]`, `[2]`},
		{`[1,{"a":[2]}]`, ` [ 3 , "x" ] `, `[1,{"a":[2]},3,"x"]`},
		{``, `[1]`, `[1]`},
	} {
		if got := string(appendItems([]byte(tc[0]), []byte(tc[1]))); got != tc[2] {
			t.Errorf("appendItems(%s, %s) = %s, want %s", tc[0], tc[1], got, tc[2])
		}
	}
}

func TestTranscriptBounds(t *testing.T) {
	var tr transcript
	for i := range maxTurns + 3 {
		tr.add(string(rune('a'+i)), []byte(`[1]`), "acc")
	}
	if len(tr.turns) != maxTurns || tr.get("a") != nil || tr.get(string(rune('a'+maxTurns+2))) == nil {
		t.Fatalf("kept %d turns", len(tr.turns))
	}
	tr.add("big", make([]byte, maxTranscriptBytes+1), "acc")
	if tr.get("big") != nil {
		t.Fatal("kept a transcript above the bound")
	}
	if tr.bytes != 3*maxTurns {
		t.Fatalf("bytes %d", tr.bytes)
	}
}

// fixtureSocket serves a gateway whose upstream streams the server events
// of the fixture (returned as lines, one per event), and returns a client
// WebSocket on GET /v1/responses and the fixture's response.create frame.
func fixtureSocket(t *testing.T) (lines []string, sys *actors.System, conn *websocket.Conn, frame []byte) {
	t.Helper()
	jsonl := readFixture(t, "server-events.text.jsonl")
	lines = strings.Split(strings.TrimSpace(string(jsonl)), "\n")
	var sse []byte
	for _, l := range lines {
		sse = translate.AppendEvent(sse, gjson.Get(l, "type").Str, []byte(l))
	}
	s, sys, key := testServer(t, 1, cannedTransport{200, "text/event-stream", sse})
	ln := serveTCP(t, s)
	conn, resp, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+ln.Addr().String()+"/v1/responses",
		map[string][]string{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v %v", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	frame, _ = sjson.SetBytes(readFixture(t, "client.response.create.openai-api.json"), "model", "m")
	return lines, sys, conn, frame
}

// TestWebSocketRelaysServerEvents: an upstream stream made of the server
// frames of the fixture reaches a WebSocket client as exactly those frames,
// one text frame per event, byte for byte, with no SSE framing.
func TestWebSocketRelaysServerEvents(t *testing.T) {
	lines, sys, conn, frame := fixtureSocket(t)
	if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i, want := range lines {
		typ, got, err := conn.ReadMessage()
		if err != nil || typ != websocket.TextMessage {
			t.Fatalf("frame %d: type %d, %v", i, typ, err)
		}
		if !bytes.Equal(got, []byte(want)) {
			t.Fatalf("frame %d:\n got %s\nwant %s", i, got, want)
		}
	}
	waitIdle(t, sys)
}

// A binary frame gets an error frame and the connection stays usable:
// ignoring it left the client waiting for an answer forever.
func TestWebSocketBinaryFrameAnswered(t *testing.T) {
	lines, sys, conn, frame := fixtureSocket(t)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, bin := range [][]byte{frame, {}} {
		if err := conn.WriteMessage(websocket.BinaryMessage, bin); err != nil {
			t.Fatal(err)
		}
		typ, got, err := conn.ReadMessage()
		if err != nil || typ != websocket.TextMessage {
			t.Fatalf("binary frame: type %d, %v", typ, err)
		}
		if gjson.GetBytes(got, "type").Str != "error" || gjson.GetBytes(got, "status").Int() != 400 ||
			gjson.GetBytes(got, "error.type").Str != "invalid_request_error" {
			t.Fatalf("binary frame answered %s", got)
		}
	}
	// An empty text frame is bad JSON, not a binary frame.
	if err := conn.WriteMessage(websocket.TextMessage, nil); err != nil {
		t.Fatal(err)
	}
	if _, got, err := conn.ReadMessage(); err != nil || !strings.Contains(string(got), "could not parse the JSON") {
		t.Fatalf("empty text frame: %s %v", got, err)
	}
	// The connection still serves.
	if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
		t.Fatal(err)
	}
	for i, want := range lines {
		_, got, err := conn.ReadMessage()
		if err != nil || !bytes.Equal(got, []byte(want)) {
			t.Fatalf("frame %d after binary: %s %v", i, got, err)
		}
	}
	// A text frame that is not UTF-8 fails the connection with 1007
	// (RFC 6455 §8.1).
	if err := conn.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"response.create\",\"model\":\"\xff\"}")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseInvalidFramePayloadData) {
		t.Fatalf("invalid UTF-8: %s %v, want close 1007", got, err)
	}
	waitIdle(t, sys)
}
