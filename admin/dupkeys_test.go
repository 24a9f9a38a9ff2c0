package admin

import (
	"strings"
	"testing"
)

// TestAdminRefusesRepeatedKeys: an admin body that repeats a key is a 400
// naming it, with nothing changed: a ledger entry with two "amount"s took
// the last one (encoding/json's rule) while a reader of the body, a log or
// an operator, may see the first.
func TestAdminRefusesRepeatedKeys(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("POST", "/api/admin/users", map[string]any{"name": "zed", "balance": "1"}).want(t, 201)
	r := c.do("POST", "/api/admin/users/zed/ledger", `{"amount":"1","note":"t","amount":"1000"}`).want(t, 400)
	if !strings.Contains(string(r.body), `amount`) {
		t.Fatalf("refusal does not name the key: %s", r.body)
	}
	r = c.do("PUT", "/api/admin/prices/m", `{"input":"1","output":"1","x":{"a":1,"a":2}}`).want(t, 400)
	if !strings.Contains(string(r.body), `x.a`) {
		t.Fatalf("refusal does not name the nested key's path: %s", r.body)
	}
	r = c.do("GET", "/api/admin/users/zed", nil).want(t, 200)
	if u := r.json["user"].(map[string]any); u["balance"] != "1.000000" || len(r.json["ledger"].([]any)) != 1 {
		t.Fatalf("after refused bodies: %v", r.json)
	}
	// The same keys in different objects, or in an array's objects, are fine.
	c.do("POST", "/api/admin/users/zed/ledger", `{"amount":"1","note":"t"}`).want(t, 200)
}

func TestRepeatedKey(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":1,"b":2}`:                       "",
		`{"a":[{"x":1},{"x":2}]}`:             "",
		`{"a":{"x":1},"b":{"x":1}}`:           "",
		`{"a":1,"a":2}`:                       "a",
		`{"a":[1,{"x":1,"x":2}]}`:             "a.1.x",
		`[{"k":{"z":[],"z":0}}]`:              "0.k.z",
		`{"s":"a","n":{"m":[[1],[2]]},"s":3}`: "s",
		`{"a":`:                               "",
		`not json`:                            "",
	} {
		if got := repeatedKey([]byte(body)); got != want {
			t.Errorf("repeatedKey(%s) = %q, want %q", body, got, want)
		}
	}
}
