package upstream

import (
	"runtime"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/poll"
	"github.com/troupe-gw/troupe/storage"
)

// Accounts on one base URL share their endpoint URLs; other bases get
// their own; once no transport holds a URL its entry goes.
func TestEndpointURLsShared(t *testing.T) {
	acc := func(name, base string) storage.Account {
		return storage.Account{Name: name, Provider: storage.ProviderOpenAI, BaseURL: base, Credentials: storage.Credentials{APIKey: "sk-" + name}}
	}
	a, err := New(acc("a", "http://shared.test:1/v1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(acc("b", "http://shared.test:1/v1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(acc("c", "http://other.test:1/v1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	oa, ob, oc := a.(*openAI), b.(*openAI), c.(*openAI)
	if oa.chatURL != ob.chatURL || oa.respURL != ob.respURL {
		t.Fatal("two accounts on one base URL hold URLs of their own")
	}
	if oa.chatURL == oc.chatURL || oc.chatURL.String() != "http://other.test:1/v1/chat/completions" ||
		oa.respURL.String() != "http://shared.test:1/v1/responses" {
		t.Fatalf("URLs %s, %s, %s", oa.chatURL, oc.chatURL, oa.respURL)
	}
	if k := endpoints.keys(".test:1/v1/"); len(k) != 4 {
		t.Fatalf("entries interned: %q, want 4", k)
	}
	an, err := New(storage.Account{Name: "x", Provider: storage.ProviderAnthropic, BaseURL: "http://shared.test:1", Credentials: storage.Credentials{APIKey: "k"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if u := an.(*anthropic).msgBetaURL.String(); u != "http://shared.test:1/v1/messages?beta=true" {
		t.Fatalf("beta URL %s", u)
	}
	runtime.KeepAlive(oa)
	runtime.KeepAlive(ob)
	runtime.KeepAlive(oc)
	runtime.KeepAlive(an)
	oa, ob, oc, a, b, c, an = nil, nil, nil, nil, nil, nil, nil
	poll.Until(t, 10*time.Second, "the entries of unused URLs to go", func() bool {
		runtime.GC()
		return len(endpoints.keys("shared.test:1/")) == 0 && len(endpoints.keys("other.test:1/")) == 0
	})
}
