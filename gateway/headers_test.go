package gateway

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestSessionHeadersCanonical: the header names the gateway looks up with
// PeekCanonical are in the form fasthttp stores a received name in, so a
// client's header is found however it spelled the name's case.
func TestSessionHeadersCanonical(t *testing.T) {
	names := append([][]byte{headerAuthorization}, sessionHeaders...)
	for _, name := range names {
		for _, sent := range []string{string(name), strings.ToLower(string(name)), strings.ToUpper(string(name))} {
			var req fasthttp.Request
			if err := req.Header.Read(bufio.NewReader(strings.NewReader("POST / HTTP/1.1\r\nHost: x\r\n" + sent + ": v\r\n\r\n"))); err != nil {
				t.Fatal(err)
			}
			if got := string(req.Header.PeekCanonical(name)); got != "v" {
				t.Errorf("%q sent as %q: PeekCanonical(%q) = %q, want v", name, sent, name, got)
			}
		}
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("x-claude-code-session-id", "s1")
	if got := sessionKey(&ctx, []byte(`{"prompt_cache_key":"p"}`)); got != "s1" {
		t.Errorf("sessionKey = %q, want s1", got)
	}
	ctx.Request.Header.Set("session-id", "s0")
	if got := sessionKey(&ctx, nil); got != "s0" {
		t.Errorf("sessionKey = %q, want s0 (the first in order)", got)
	}
}
