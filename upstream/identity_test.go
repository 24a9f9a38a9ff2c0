package upstream

import (
	"regexp"
	"testing"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestIdentity(t *testing.T) {
	id := NewIdentity([]byte("instance secret, 32 bytes long.."))
	a1, a2 := id.Session("acct-1", "s:x"), id.Session("acct-1", "s:x")
	if a1 != a2 || !uuidRE.MatchString(a1) {
		t.Fatalf("not stable or not a UUID: %q %q", a1, a2)
	}
	if id.Session("acct-2", "s:x") == a1 {
		t.Fatal("two accounts share a session id")
	}
	if id.Session("acct-1", "s:y") == a1 {
		t.Fatal("two inputs share a session id")
	}
	if id.PromptCacheKey("acct-1", "s:x") == a1 || id.Installation("acct-1") == id.Installation("acct-2") {
		t.Fatal("kinds or accounts collide")
	}
	other := NewIdentity([]byte("another secret"))
	if other.Installation("acct-1") == id.Installation("acct-1") {
		t.Fatal("the secret does not matter")
	}
}
