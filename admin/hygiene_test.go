package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/hygiene"
	"github.com/troupe-gw/troupe/upstream"
)

// refusedPool is the pool with acct-a seen unauthorized (its credentials
// refused), as the account actor would publish it after a 401.
type refusedPool struct{ *actors.System }

func (p refusedPool) Views() []actors.View {
	vs := p.System.Views()
	for i := range vs {
		if vs[i].Name == "acct-a" && vs[i].Status == actors.StatusActive {
			vs[i].Status = actors.StatusUnauthorized
			lf := actors.LastFailures{} // the published view's are shared: set new ones
			if p := vs[i].LastFailures; p != nil {
				lf = *p
			}
			lf.LastFailure[upstream.ClassAuth] = time.Now()
			vs[i].LastFailures = &lf
		}
	}
	return vs
}

func TestAdminHygieneShowsAndRestores(t *testing.T) {
	e := newAdminEnv(t, 2)
	c := e.login()
	c.do("GET", "/api/admin/hygiene", nil).want(t, 503) // no rule on this server
	k, err := hygiene.New(context.Background(), hygiene.Rule{Action: hygiene.ActionDisable}, e.store, refusedPool{e.sys}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.hygiene = k
	if err := k.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}

	r := c.do("GET", "/api/admin/hygiene", nil).want(t, 200)
	flags := r.json["flags"].([]any)
	if r.json["rule"].(map[string]any)["action"] != "disable" || len(flags) != 1 {
		t.Fatalf("hygiene: %s", r.body)
	}
	f := flags[0].(map[string]any)
	if f["name"] != "acct-a" || f["action"] != "disable" || f["kind"] != "unauthorized" || !strings.Contains(f["reason"].(string), "unauthorized since") {
		t.Fatalf("flag: %v", f)
	}
	waitFor(t, "acct-a disabled in the pool", func() bool {
		return c.do("GET", "/api/admin/accounts/acct-a", nil).json["live"].(map[string]any)["status"] == "disabled"
	})
	r = c.do("GET", "/api/admin/accounts/acct-a", nil).want(t, 200)
	if r.json["disabled"] != true || r.json["hygiene"].(map[string]any)["reason"] != f["reason"] {
		t.Fatalf("account: disabled %v, hygiene %v", r.json["disabled"], r.json["hygiene"])
	}
	if _, ok := c.do("GET", "/api/admin/accounts/acct-b", nil).want(t, 200).json["hygiene"]; ok {
		t.Errorf("acct-b has a hygiene flag")
	}
	list := c.do("GET", "/api/admin/accounts", nil).want(t, 200).json["accounts"].([]any)
	if h, ok := list[0].(map[string]any)["hygiene"].(map[string]any); !ok || h["reason"] != f["reason"] {
		t.Errorf("the list's acct-a: hygiene %v", list[0].(map[string]any)["hygiene"])
	}
	if _, ok := list[1].(map[string]any)["hygiene"]; ok {
		t.Errorf("the list's acct-b has a hygiene flag")
	}

	r = c.do("POST", "/api/admin/accounts/acct-a/restore", nil).want(t, 200)
	if r.json["restored"] != true || r.json["flag"].(map[string]any)["reason"] != f["reason"] {
		t.Fatalf("restore: %s", r.body)
	}
	waitFor(t, "acct-a back in service", func() bool {
		a := c.do("GET", "/api/admin/accounts/acct-a", nil).json
		_, flagged := a["hygiene"]
		return a["live"].(map[string]any)["status"] == "active" && a["disabled"] == false && !flagged
	})
	if r := c.do("GET", "/api/admin/hygiene", nil).want(t, 200); len(r.json["flags"].([]any)) != 0 {
		t.Errorf("flags after restore: %s", r.body)
	}
	c.do("POST", "/api/admin/accounts/ghost/restore", nil).want(t, 404)
	c.do("POST", "/api/admin/hygiene", nil).want(t, 405)
}
