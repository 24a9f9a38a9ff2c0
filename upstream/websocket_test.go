package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
)

func TestCreateFrame(t *testing.T) {
	for in, want := range map[string]string{
		`{"model":"m","stream":true,"input":"x"}`: `{"type":"response.create","model":"m","input":"x"}`,
		` { }`:                             `{"type":"response.create"}`,
		`{"background":false,"model":"m"}`: `{"type":"response.create","model":"m"}`,
	} {
		got, err := createFrame([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("createFrame(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := createFrame([]byte(`[1]`)); KindOf(err) != KindRequest {
		t.Fatalf("array body: %v", err)
	}
	tr, err := New(storage.Account{Name: "c", Provider: storage.ProviderCodex, Credentials: storage.Credentials{AccessToken: "tok"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := tr.(WebSocketDialer).CreateFrame([]byte(`{"model":"m","store":true}`))
	if err != nil || gjson.GetBytes(f, "store").Type != gjson.False || gjson.GetBytes(f, "type").Str != "response.create" {
		t.Fatalf("codex frame %s, %v", f, err)
	}
	compat, _ := New(storage.Account{Name: "x", Provider: storage.ProviderOpenAICompat, BaseURL: "http://h/v1", Credentials: storage.Credentials{APIKey: "k"}}, Options{})
	if SupportsWebSocket(compat) || !SupportsWebSocket(tr) {
		t.Fatal("SupportsWebSocket: openai_compat must not, codex must")
	}
}

// FuzzCreateFrame: any JSON object becomes a valid frame whose first key is
// "type":"response.create" and that keeps every other top-level key except
// stream and background.
func FuzzCreateFrame(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{}`, ` {"a":[1,{"b":2}],"stream":true}`, `{"type":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
			return
		}
		out, err := createFrame(body)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if !json.Valid(out) || gjson.GetBytes(out, "type").Str != "response.create" || gjson.GetBytes(out, "stream").Exists() {
			t.Fatalf("%q → %q", body, out)
		}
	})
}

func TestWebSocketErrorResponse(t *testing.T) {
	r, ok := WebSocketErrorResponse([]byte(`{"type":"error","status":429,"error":{"type":"usage_limit_reached","message":"m","resets_in_seconds":1234},"headers":{"x-codex-primary-used-percent":"100.0"}}`), nil)
	if !ok || r.Status != 429 || r.Header.Get("X-Codex-Primary-Used-Percent") != "100.0" {
		t.Fatalf("%+v %v", r, ok)
	}
	b, _ := io.ReadAll(r.Body)
	if v := Classify(r.Status, r.Header, b); v.Class != ClassQuota {
		t.Fatalf("classified %v from %s", v.Class, b)
	}
	if _, ok := WebSocketErrorResponse([]byte(`{"type":"error","error":{"message":"no status"}}`), nil); ok {
		t.Fatal("an error frame without status was mapped")
	}
}

func TestWebSocketReadError(t *testing.T) {
	if err := WebSocketReadError(context.Background(), &websocket.CloseError{Code: websocket.CloseMessageTooBig}); !errors.Is(err, ErrMessageTooBig) || KindOf(err) != KindProtocol {
		t.Fatalf("1009: %v", err)
	}
	if err := WebSocketReadError(context.Background(), &websocket.CloseError{Code: websocket.CloseGoingAway}); KindOf(err) != KindConn {
		t.Fatalf("1001: %v", err)
	}
}
