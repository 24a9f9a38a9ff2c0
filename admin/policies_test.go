package admin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/scripts"
)

const goodPolicy = `
policy = { description = "everyone warm" }
function score(a, now)
  if a.status ~= "active" then return nil end
  return 1, "warm"
end
`

// badPolicy has a syntax error on line 3.
const badPolicy = "function score(a, now)\n  local x = 1\n  return x +\nend\n"

func TestAdminPolicies(t *testing.T) {
	e := newAdminEnv(t, 3)
	c := e.login()
	r := c.do("GET", "/api/admin/policies", nil).want(t, 200)
	if len(r.json["builtins"].([]any)) == 0 || r.json["status"] == nil {
		t.Fatalf("list: %s", r.body)
	}
	// Validate: the error carries its line; nothing is stored.
	r = c.do("POST", "/api/admin/policies/mine/validate", map[string]string{"source": badPolicy}).want(t, 400)
	if r.errCode() != "policy_invalid" || r.json["error"].(map[string]any)["line"].(float64) != 4 {
		t.Fatalf("validate bad: %s", r.body)
	}
	c.do("POST", "/api/admin/policies/mine/validate", map[string]string{"source": goodPolicy}).want(t, 200)
	c.do("POST", "/api/admin/policies/mine/validate", `{`).want(t, 400)
	c.do("POST", "/api/admin/policies/mine/validate", nil).want(t, 404)  // nothing stored, no built-in
	c.do("POST", "/api/admin/policies/smart/validate", nil).want(t, 200) // the built-in source
	c.do("GET", "/api/admin/policies/mine", nil).want(t, 404)
	c.do("POST", "/api/admin/policies/bad%20name/validate", nil).want(t, 400)

	// Simulate on the live pool: everyone moves from healthy to warm.
	waitFor(t, "scores", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=healthy", nil).json["total"].(float64) == 3
	})
	r = c.do("POST", "/api/admin/policies/mine/simulate", map[string]string{"source": goodPolicy}).want(t, 200)
	if r.json["accounts"].(float64) != 3 || r.json["tiers"].(map[string]any)["warm"].(float64) != 3 || r.json["changed"].(float64) != 3 ||
		len(r.json["top"].([]any)) != 3 || r.json["description"] != "everyone warm" {
		t.Fatalf("simulate: %s", r.body)
	}
	// And a steady load through the pool as stored: 20 requests an
	// account, spread evenly over the three equal accounts.
	load, _ := r.json["load"].(map[string]any)
	if load == nil || load["requests"] != 60.0 || load["unserved"] != 0.0 || load["accounts"] != 3.0 || load["serving"] != 3.0 ||
		load["busiest"] != 20.0 || load["gini"] != 0.0 || load["top1_accounts"] != 1.0 {
		t.Fatalf("simulate load: %v", r.json["load"])
	}
	if r := c.do("POST", "/api/admin/policies/mine/simulate", map[string]string{"source": badPolicy}).want(t, 400); r.json["error"].(map[string]any)["line"].(float64) != 4 {
		t.Fatalf("simulate bad: %s", r.body)
	}

	// Save (refused with its line, then accepted), activate, the pool follows.
	c.do("PUT", "/api/admin/policies/mine", map[string]string{"source": badPolicy}).want(t, 400)
	c.do("PUT", "/api/admin/policies/mine", map[string]string{"source": goodPolicy}).want(t, 200)
	c.do("PUT", "/api/admin/policies/mine", map[string]string{"source": strings.Replace(goodPolicy, `"warm"`, `"risky"`, 1)}).want(t, 200)
	// Nothing of mine was active: rolling back activates the version before the latest.
	if r := c.do("POST", "/api/admin/policies/mine/rollback", nil).want(t, 200); r.json["activated"].(map[string]any)["version"].(float64) != 1 {
		t.Fatalf("first rollback: %s", r.body)
	}
	waitFor(t, "the pool to turn warm", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=warm", nil).json["total"].(float64) == 3
	})
	c.do("POST", "/api/admin/policies/mine/activate", nil).want(t, 200) // latest: v2
	waitFor(t, "the pool to turn risky", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=risky", nil).json["total"].(float64) == 3
	})
	r = c.do("POST", "/api/admin/policies/mine/rollback", nil).want(t, 200)
	if r.json["activated"].(map[string]any)["version"].(float64) != 1 {
		t.Fatalf("rollback: %s", r.body)
	}
	waitFor(t, "the pool to turn warm again", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=warm", nil).json["total"].(float64) == 3
	})
	r = c.do("GET", "/api/admin/policies/mine/history", nil).want(t, 200)
	if v := r.json["versions"].([]any); len(v) != 2 || v[1].(map[string]any)["activated_at"] == nil {
		t.Fatalf("history: %s", r.body)
	}
	c.do("POST", "/api/admin/policies/mine/activate", map[string]int{"version": 9}).want(t, 404)
	c.do("POST", "/api/admin/policies/mine/activate", `x`).want(t, 400)
	c.do("POST", "/api/admin/policies/ghost/rollback", nil).want(t, 404)
	c.do("DELETE", "/api/admin/policies/mine", nil).want(t, 405)
	if r := c.do("GET", "/api/admin/ops", nil).want(t, 200); r.json["tiers"].(map[string]any)["warm"].(float64) != 3 {
		t.Fatalf("ops after rollback: %s", r.body)
	}
	// Back to a built-in that was never stored: it is stored as version 1
	// of its name and activated (it answered 404, leaving no way back).
	r = c.do("POST", "/api/admin/policies/smart/activate", nil).want(t, 200)
	if a := r.json["activated"].(map[string]any); a["name"] != "smart" || a["version"].(float64) != 1 {
		t.Fatalf("activate the built-in: %s", r.body)
	}
	waitFor(t, "the pool to turn healthy under smart", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=healthy", nil).json["total"].(float64) == 3
	})
	if src, _ := scripts.Builtin("smart"); c.do("GET", "/api/admin/policies/smart", nil).want(t, 200).json["source"] != src {
		t.Fatal("the stored built-in is not its source")
	}
	c.do("POST", "/api/admin/policies/smart/activate", nil).want(t, 200) // stored now: no second copy
	if v := c.do("GET", "/api/admin/policies/smart/history", nil).want(t, 200).json["versions"].([]any); len(v) != 1 {
		t.Fatalf("smart history after two activations: %d versions", len(v))
	}
	c.do("POST", "/api/admin/policies/smart/activate", map[string]int{"version": 7}).want(t, 404)
}

func TestAdminUI(t *testing.T) {
	e := newAdminEnv(t, 0)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		resp, err := noRedirect.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, _ := get("/admin"); resp.StatusCode != 302 || !strings.HasSuffix(resp.Header.Get("Location"), "/admin/") {
		t.Fatalf("/admin: %d %v", resp.StatusCode, resp.Header)
	}
	for _, p := range []string{"/admin/", "/admin/accounts", "/admin/policies/mine", "/admin/../admin/keys"} {
		resp, body := get(p)
		if resp.StatusCode != 200 || !strings.Contains(body, "Troupe admin") || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			resp.Header.Get("Cache-Control") != "no-cache" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %v %q", p, resp.StatusCode, resp.Header, body)
		}
	}
	resp, body := get("/admin/assets/app-123.js")
	if resp.StatusCode != 200 || body != "console.log(1)" || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") ||
		!strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Fatalf("asset: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := get("/admin/assets/missing.js"); resp.StatusCode != 404 {
		t.Fatalf("missing asset: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", e.base+"/admin/", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
		t.Fatalf("POST /admin/: %v %v", resp.StatusCode, err)
	}
	e.srv.SetUI(nil)
	if resp, _ := get("/admin/"); resp.StatusCode != 404 {
		t.Fatalf("without a UI: %d", resp.StatusCode)
	}
}

// TestAdminLargeBodyWithSession checks that a logged-in session may send
// bodies above the small limit of unauthenticated requests (imports).
func TestAdminLargeBodyWithSession(t *testing.T) {
	e := newAdminEnv(t, 0)
	var b strings.Builder
	b.WriteString("[")
	pad := strings.Repeat("x", 100)
	for i := range 500 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"name":"bulk-` + itoa(i) + `","provider":"openai","models":["m"],"tags":["` + pad + `"],"base_url":"http://127.0.0.1:1/` + pad + `"}`)
	}
	b.WriteString("]")
	if b.Len() <= gateway.UnauthenticatedBodyLimit {
		t.Fatalf("body of %d bytes is not above the limit", b.Len())
	}
	// Without a session the server answers 401 before reading the body and
	// closes: the client sees the 401, or a reset while it is still writing.
	// Either way the body was refused unread.
	req, _ := http.NewRequest("POST", e.base+"/api/admin/accounts/import?format=troupe", strings.NewReader(b.String()))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("large body without a session: %d, want 401", resp.StatusCode)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("large body without a session: %v, want 401 or a reset", err)
	}
	// A login over the small limit is told so (it was told to send an API key).
	lr, err := http.Post(e.base+"/api/admin/login", "application/json", strings.NewReader(`{"username":"admin","password":"`+strings.Repeat("p", 70000)+`"}`))
	if err == nil {
		lb, _ := io.ReadAll(lr.Body)
		lr.Body.Close()
		if lr.StatusCode != 413 || !strings.Contains(string(lb), "a login has at most") {
			t.Fatalf("70 KB login: %d %s, want 413", lr.StatusCode, lb)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("70 KB login: %v", err)
	}
	c := e.login()
	if r := c.do("POST", "/api/admin/accounts/import?format=troupe", b.String()).want(t, 200); r.json["created"].(float64) != 500 {
		t.Fatalf("import: %s", r.body)
	}
	// Past the gateway's own limit, a session gets 413 (it got 401 "You
	// didn't provide an API key"). The head alone is sent: the answer comes
	// before any of the body is read.
	u, _ := url.Parse(e.base)
	var cookies []string
	for _, ck := range c.hc.Jar.Cookies(u) {
		cookies = append(cookies, ck.Name+"="+ck.Value)
	}
	st, body := headOnly(t, u.Host, fmt.Sprintf("POST /api/admin/accounts/import?format=tokens HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\n%s: %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n",
		u.Host, strings.Join(cookies, "; "), CSRFHeader, c.csrf, 17<<20))
	if st != 413 {
		t.Fatalf("17 MiB with a session: %d %s, want 413", st, body)
	}
	// The same with an admin API key instead of a session.
	st, body = headOnly(t, u.Host, fmt.Sprintf("PUT /api/admin/policies/x HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		u.Host, e.adminKey, 17<<20))
	if st != 413 {
		t.Fatalf("17 MiB with an admin key: %d %s, want 413", st, body)
	}
}

// headOnly sends a request head (its body never follows) to host on a
// connection of its own and returns the answer's status and body.
func headOnly(t *testing.T, host, head string) (int, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, head)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var s []byte
	for ; i > 0; i /= 10 {
		s = append([]byte{digits[i%10]}, s...)
	}
	return string(s)
}

// Oversized input is refused, not stored or echoed: a policy source past
// scripts.MaxSourceBytes, and a group past 200 bytes on a key or an
// account.
func TestAdminRefusesOversizedInput(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	huge := goodPolicy + "\n-- " + strings.Repeat("x", scripts.MaxSourceBytes) + "\n"
	r := c.do("PUT", "/api/admin/policies/big", map[string]string{"source": huge}).want(t, 400)
	if r.errCode() != "policy_invalid" || !strings.Contains(string(r.body), "at most") {
		t.Fatalf("oversized source: %s", r.body)
	}
	c.do("GET", "/api/admin/policies/big", nil).want(t, 404)
	group := strings.Repeat("g", 201) // canaries: TestCanaryAdmin (cmd/troupe)
	if r := c.do("POST", "/api/admin/keys", map[string]any{"name": "k", "group": group}).want(t, 400); r.errParam() != "group" {
		t.Fatalf("key group: %s", r.body)
	}
	if r := c.do("POST", "/api/admin/accounts", map[string]any{"name": "a2", "provider": "openai", "api_key": "sk-x", "group": group}).want(t, 400); r.errParam() != "group" {
		t.Fatalf("account group: %s", r.body)
	}
}

// The admin API answers in OpenAI's error shape whichever header carries
// the key (x-api-key is what Anthropic clients send).
func TestAdminErrorShapeWithXAPIKey(t *testing.T) {
	e := newAdminEnv(t, 0)
	req, _ := http.NewRequest("GET", e.base+"/api/admin/policies/nosuch", nil)
	req.Header.Set("x-api-key", e.adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), `"code":"not_found"`) || strings.Contains(string(body), `"type":"error"`) {
		t.Fatalf("x-api-key on the admin API: %d %s, want OpenAI's shape", resp.StatusCode, body)
	}
}

// A policy whose only stored version serves rolls back to the built-in
// default as it ships (before: 409, no way back but knowing smart's name;
// issue 16, finding 10); the built-in itself has nothing earlier.
func TestPolicyRollbackToBuiltin(t *testing.T) {
	e := newAdminEnv(t, 3)
	c := e.login()
	c.do("PUT", "/api/admin/policies/only", map[string]string{"source": goodPolicy}).want(t, 200)
	c.do("POST", "/api/admin/policies/only/activate", nil).want(t, 200)
	waitFor(t, "the pool to turn warm", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=warm", nil).json["total"].(float64) == 3
	})
	r := c.do("POST", "/api/admin/policies/only/rollback", nil).want(t, 200)
	if a := r.json["activated"].(map[string]any); a["name"] != scripts.DefaultPolicy {
		t.Fatalf("rollback of a single version: %s", r.body)
	}
	waitFor(t, "the pool to turn healthy under the built-in default", func() bool {
		return c.do("GET", "/api/admin/accounts?tier=healthy", nil).json["total"].(float64) == 3
	})
	src, _ := scripts.Builtin(scripts.DefaultPolicy)
	if p := c.do("GET", "/api/admin/policies/"+scripts.DefaultPolicy, nil).want(t, 200); p.json["source"] != src {
		t.Fatalf("the default serves another source: %s", p.body)
	}
	if r := c.do("POST", "/api/admin/policies/"+scripts.DefaultPolicy+"/rollback", nil).want(t, 409); r.errCode() != "no_previous_version" {
		t.Fatalf("rollback of the built-in: %s", r.body)
	}
}

// A policy with more distinct constants than scripts.MaxConstants is
// refused by the admin API with its line before it is compiled (20,000
// constants took about a second of CPU each time, 40,000 four).
func TestPolicyConstantsBoundedInAPI(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	var b strings.Builder
	b.WriteString(goodPolicy + "local t = {\n")
	for i := range 20_000 {
		b.WriteString(strconv.Itoa(100_000+7*i) + ",\n")
	}
	b.WriteString("}\n")
	for _, path := range []string{"/api/admin/policies/big", "/api/admin/policies/big/validate"} {
		method := "PUT"
		if strings.HasSuffix(path, "validate") {
			method = "POST"
		}
		r := c.do(method, path, map[string]string{"source": b.String()}).want(t, 400)
		if r.errCode() != "policy_invalid" || r.json["error"].(map[string]any)["line"].(float64) == 0 ||
			!strings.Contains(string(r.body), "distinct names, numbers and strings") {
			t.Fatalf("%s %s: %s", method, path, r.body)
		}
	}
	c.do("GET", "/api/admin/policies/big", nil).want(t, 404)
}

// A negative version is refused (400, param version) by activate, validate
// and simulate, as canary refuses it. Before, storage read it as "the
// latest" (v <= 0), so POST …/activate {"version": -1} activated the latest
// version (found with curl against troupe demo).
func TestPolicyNegativeVersionRefused(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("PUT", "/api/admin/policies/neg", map[string]string{"source": goodPolicy}).want(t, 200)
	for _, op := range []string{"activate", "validate", "simulate", "canary"} {
		body := map[string]any{"version": -1}
		if op == "canary" {
			body["percent"] = 10
		}
		r := c.do("POST", "/api/admin/policies/neg/"+op, body).want(t, 400)
		if p, _ := r.json["error"].(map[string]any)["param"].(string); p != "version" {
			t.Errorf("%s with version -1: %s, want param version", op, r.body)
		}
	}
	r := c.do("GET", "/api/admin/policies/neg/history", nil).want(t, 200)
	for _, v := range r.json["versions"].([]any) {
		if a := v.(map[string]any)["activated_at"]; a != nil {
			t.Errorf("version activated by a refused request: %s", r.body)
		}
	}
}

// TestPolicyBodiesRefuseUnknownFields: the policy routes' bodies refuse a
// field they do not take, naming it, with nothing changed. Before, a
// misspelt field was dropped in silence: {"verison": 1} on activate
// activated the latest version instead of version 1, and a canary's
// {"percnt": 10, "group": "beta"} ran for the group alone.
func TestPolicyBodiesRefuseUnknownFields(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("PUT", "/api/admin/policies/typo", map[string]string{"source": goodPolicy}).want(t, 200)
	c.do("PUT", "/api/admin/policies/typo", map[string]string{"source": goodPolicy + "\n-- v2"}).want(t, 200)
	for _, tc := range []struct{ method, path, body, field string }{
		{"POST", "activate", `{"verison": 1}`, "verison"},
		{"POST", "canary", `{"percnt": 10, "group": "beta"}`, "percnt"},
		{"POST", "validate", `{"version": 1, "sorce": "x"}`, "sorce"},
		{"POST", "simulate", `{"verison": 1}`, "verison"},
		{"PUT", "", `{"source": "function score() return 1 end", "activate": true}`, "activate"},
	} {
		path := "/api/admin/policies/typo"
		if tc.path != "" {
			path += "/" + tc.path
		}
		r := c.do(tc.method, path, tc.body).want(t, 400)
		if msg, _ := r.json["error"].(map[string]any)["message"].(string); !strings.Contains(msg, `unknown field "`+tc.field+`"`) {
			t.Errorf("%s %s %s: %s, want the unknown field named", tc.method, path, tc.body, r.body)
		}
	}
	r := c.do("GET", "/api/admin/policies/typo/history", nil).want(t, 200)
	if v := r.json["versions"].([]any); len(v) != 2 {
		t.Fatalf("history %s, want the two saved versions and nothing more", r.body)
	}
	for _, v := range r.json["versions"].([]any) {
		if a := v.(map[string]any)["activated_at"]; a != nil {
			t.Errorf("version activated by a refused request: %s", r.body)
		}
	}
	if r := c.do("GET", "/api/admin/policies", nil).want(t, 200); r.json["canary"] != nil {
		t.Errorf("a canary started by a refused request: %s", r.body)
	}
}

// TestPolicyMissingVersionNamed: activating or canarying a version or a
// policy that is not stored is a 404 that names what is missing. It said
// "Nothing found at /api/admin/policies/mine/activate.", as if the URL
// were wrong.
func TestPolicyMissingVersionNamed(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("PUT", "/api/admin/policies/mine", map[string]string{"source": goodPolicy}).want(t, 200)
	for _, tc := range []struct{ path, body, want string }{
		{"/api/admin/policies/mine/activate", `{"version": 9}`, `Policy "mine" has no stored version 9`},
		{"/api/admin/policies/mine/canary", `{"percent": 10, "version": 9}`, `Policy "mine" has no stored version 9`},
		{"/api/admin/policies/nosuch/activate", ``, `No policy "nosuch" is stored`},
		{"/api/admin/policies/nosuch/canary", `{"percent": 10}`, `No policy "nosuch" is stored`},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := c.do("POST", tc.path, body).want(t, 404)
		if msg, _ := r.json["error"].(map[string]any)["message"].(string); !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s %s: %s, want a message containing %q", tc.path, tc.body, r.body, tc.want)
		}
	}
}
