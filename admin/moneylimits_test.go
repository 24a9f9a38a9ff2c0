package admin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/storage"
)

// TestAdminMoneyLimits: a top-up past storage.MaxAmount is a 400 that
// leaves the balance and the ledger as they were (it used to overflow
// SQLite's integer into a REAL, answer 500 after the commit and break the
// user list); a price past it is refused; a user's key never becomes an
// admin key, and a key says whose it is.
func TestAdminMoneyLimits(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("POST", "/api/admin/users", map[string]any{"name": "zed", "balance": "999999999.999990"}).want(t, 201)
	c.do("POST", "/api/admin/users", map[string]any{"name": "over", "balance": "1000000000.000001"}).want(t, 400)
	for _, amount := range []string{"0.000011", "9223372036854.775807", "1"} {
		c.do("POST", "/api/admin/users/zed/ledger", map[string]any{"amount": amount, "note": "t"}).want(t, 400)
	}
	r := c.do("GET", "/api/admin/users/zed", nil).want(t, 200)
	if u := r.json["user"].(map[string]any); u["balance"] != "999999999.999990" || len(r.json["ledger"].([]any)) != 1 {
		t.Fatalf("after refused top-ups: %v", r.json)
	}
	c.do("POST", "/api/admin/users/zed/ledger", map[string]any{"amount": "0.00001", "note": "to the limit"}).want(t, 200)
	c.do("GET", "/api/admin/users", nil).want(t, 200)
	c.do("POST", "/api/admin/users/zed/ledger", map[string]any{"kind": "refund", "amount": "1", "note": "r", "request_id": "req-none"}).want(t, 400)

	c.do("PUT", "/api/admin/prices/m", map[string]any{"input": "9223372036854.775807", "output": "1"}).want(t, 400)
	c.do("PUT", "/api/admin/prices/m", map[string]any{"input": "1", "output": "1000000000.000001"}).want(t, 400)

	u, err := e.store.GetUser(context.Background(), "zed")
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.store.CreateAPIKey(context.Background(), storage.APIKey{Name: "zed-k", Hash: storage.HashKey("sk-troupe-zed-secret"), Prefix: "sk-troupe-z", UserID: u.ID})
	if err != nil {
		t.Fatal(err)
	}
	if c.do("PATCH", "/api/admin/keys/zed-k", map[string]any{"admin": true}).want(t, 400).errParam() != "admin" {
		t.Fatal("a user's key made an admin key was not refused for admin")
	}
	if r := c.do("GET", "/api/admin/keys/zed-k", nil).want(t, 200); r.json["admin"] != false || r.json["user_id"] != u.ID {
		t.Fatalf("key %v", r.json)
	}
	k.Admin = true
	if _, err := e.store.UpdateAPIKey(context.Background(), k); err == nil {
		t.Fatal("storage made a user's key an admin key")
	}
}

// TestStorageErrorNotFound: a storage ErrNotFound names the path asked
// for, not the policies it once described on every route.
func TestStorageErrorNotFound(t *testing.T) {
	e := newAdminEnv(t, 0)
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/api/admin/accounts/gone/probe")
	e.srv.storageError(&ctx, fmt.Errorf("sqlite: account %q: %w", "gone", storage.ErrNotFound))
	if ctx.Response.StatusCode() != 404 || !strings.Contains(string(ctx.Response.Body()), "Nothing found at /api/admin/accounts/gone/probe.") {
		t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
