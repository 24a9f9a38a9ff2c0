package gateway

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// patchBody makes the one copy the upstream gets: the target model and the
// usage option, whatever the body looks like around them, and leaves the
// client's bytes as they were.
func TestPatchBody(t *testing.T) {
	s, _, _ := testServer(t, 1, cannedTransport{})
	s.cfg.Aliases = map[string]string{"alias": "m", "odd": "a \"quoted\"\n\u00e9 model"}
	cases := []struct {
		name, body   string
		usage        bool
		wantModel    string
		wantSameBody bool // nothing to patch: the client's bytes themselves
	}{
		{name: "nothing to do", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, wantModel: "m", wantSameBody: true},
		{name: "alias", body: `{"model":"alias","messages":[{"role":"user","content":"hi"}]}`, wantModel: "m"},
		{name: "alias and usage", body: `{"model":"alias","stream":true,"messages":[{"role":"user","content":"hi"}]}`, usage: true, wantModel: "m"},
		{name: "usage only", body: `{"messages":[{"role":"user","content":"hi"}],"model":"m","stream":true}`, usage: true, wantModel: "m"},
		{name: "leading space", body: " \n\t{ \"model\" : \"alias\" , \"x\":1, \"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", usage: true, wantModel: "m"},
		{name: "escaped model name", body: `{"model":"al\u0069as","x":[1,2],"messages":[{"role":"user","content":"hi"}]}`, wantModel: "m"},
		{name: "target needs escaping", body: `{"x":{"model":"no"},"model":"odd","messages":[{"role":"user","content":"hi"}]}`, usage: true, wantModel: "a \"quoted\"\n\u00e9 model"},
		{name: "stream_options present", body: `{"model":"alias","stream_options":{"foo":1},"stream":true,"messages":[{"role":"user","content":"hi"}]}`, usage: true, wantModel: "m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &call{key: &noKey, endpoint: translate.Chat}
			body := []byte(tc.body)
			orig := append([]byte(nil), body...)
			if aerr := s.parseBody(c, body); aerr != nil {
				t.Fatal(aerr)
			}
			got, err := patchBody(c, c.body, tc.usage)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, orig) {
				t.Fatalf("the client's body changed: %s", body)
			}
			if tc.wantSameBody != (len(got) > 0 && &got[0] == &body[0]) {
				t.Errorf("copied %v, want %v", !tc.wantSameBody, tc.wantSameBody)
			}
			if !gjson.ValidBytes(got) {
				t.Fatalf("invalid JSON: %s", got)
			}
			if m := gjson.GetBytes(got, "model").String(); m != tc.wantModel {
				t.Errorf("model %q, want %q in %s", m, tc.wantModel, got)
			}
			if u := gjson.GetBytes(got, "stream_options.include_usage").Bool(); u != tc.usage {
				t.Errorf("include_usage %v, want %v in %s", u, tc.usage, got)
			}
			// Everything else is the client's.
			var n int
			gjson.ParseBytes(orig).ForEach(func(k, v gjson.Result) bool {
				n++
				if k.Str != "model" && k.Str != "stream_options" && gjson.GetBytes(got, gjson.Escape(k.Str)).Raw != v.Raw {
					t.Errorf("%s changed: %s", k.Str, got)
				}
				return true
			})
			if m := len(gjson.ParseBytes(got).Map()); m != n && m != n+1 {
				t.Errorf("%d members, the client sent %d: %s", m, n, got)
			}
		})
	}
}

// Each upstream protocol's body is made once per request, failovers
// included, and the openai Chat stream's usage variant apart from it.
func TestUpstreamBodyMadeOncePerProtocol(t *testing.T) {
	s, _, _ := testServer(t, 1, cannedTransport{})
	s.cfg.Aliases = map[string]string{"alias": "m"}
	c := &call{key: &noKey, endpoint: translate.Chat}
	if aerr := s.parseBody(c, []byte(`{"model":"alias","stream":true,"messages":[{"role":"user","content":"hi"}]}`)); aerr != nil {
		t.Fatal(aerr)
	}
	first, usage, f := s.upstreamBody(c, translate.Chat, true)
	if f != nil || !usage {
		t.Fatalf("usage %v, failure %+v", usage, f)
	}
	again, _, _ := s.upstreamBody(c, translate.Chat, true)
	plain, usage, _ := s.upstreamBody(c, translate.Chat, false)
	if &again[0] != &first[0] || usage || &plain[0] == &first[0] {
		t.Fatal("the patched body was not kept per variant")
	}
	if gjson.GetBytes(plain, "stream_options").Exists() || gjson.GetBytes(plain, "model").Str != "m" {
		t.Fatalf("compat body %s", plain)
	}
	tr, _, _ := s.upstreamBody(c, translate.Responses, true)
	tr2, _, _ := s.upstreamBody(c, translate.Responses, true)
	if &tr[0] != &tr2[0] || gjson.GetBytes(tr, "model").Str != "m" {
		t.Fatalf("translation not kept, or model %q", gjson.GetBytes(tr, "model").Str)
	}
}

// capture records the bodies it is sent and answers like inner.
type capture struct {
	mu     sync.Mutex
	bodies [][]byte
	inner  upstream.Transport
}

func (c *capture) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	c.mu.Lock()
	c.bodies = append(c.bodies, append([]byte(nil), r.Body...))
	c.mu.Unlock()
	return c.inner.Do(ctx, r)
}

// An alias and a model named by route() reach the upstream in its body,
// the rest of the body as the client sent it.
func TestAliasAndRouteModelReachUpstream(t *testing.T) {
	tr := &capture{inner: cannedTransport{200, "application/json", []byte(`{"id":"x","object":"chat.completion","choices":[]}`)}}
	s, sys, key := testServer(t, 1, tr)
	s.cfg.Aliases = map[string]string{"alias": "m"}
	rt := routing.New(sys, routing.Options{})
	if err := rt.Activate("route-model", `
function score() return 1 end
function route(r)
  if r.model == "routed" then return { model = "m" } end
  return nil
end`, 0); err != nil {
		t.Fatal(err)
	}
	s.SetRouting(rt)
	for _, model := range []string{"alias", "routed"} {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"temperature":0.5}`
		if resp := do(s, "POST", "/v1/chat/completions", key, []byte(body)); resp.StatusCode() != 200 {
			t.Fatalf("%s: status %d: %s", model, resp.StatusCode(), resp.Body())
		}
		tr.mu.Lock()
		got := tr.bodies[len(tr.bodies)-1]
		tr.mu.Unlock()
		want := strings.Replace(body, `"`+model+`"`, `"m"`, 1)
		if string(got) != want {
			t.Errorf("%s: upstream got %s, want %s", model, got, want)
		}
	}
	waitIdle(t, sys)
}
