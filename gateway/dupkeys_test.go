package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// TestBillingRefusesNestedDuplicateKeys: a user's request whose body
// repeats a key inside an object (a message's content, a tool's
// parameters) is refused 400 naming the key's path before it is admitted,
// in the client's protocol: the balance estimate reads the first occurrence
// and an upstream the last, so a user with 0.02 sent
// {"messages":[{"role":"user","content":"hi","content":"<100k tokens>"}]},
// was held on "hi", charged 0.100140 and left at -0.080272 (tester's
// finding). Nothing is charged for the refused requests.
func TestBillingRefusesNestedDuplicateKeys(t *testing.T) {
	b := billedServer(t)
	u, secret := b.userKey(t, storage.User{Name: "nested"}, 10_000_000)
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi","content":"a much longer text"}]}`, "messages.0.content"},
		{"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi","text":"more"}]}]}`, "input.0.content.0.text"},
		{"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y","content":"z"}]}`, "messages.1.content"},
	} {
		status, body := b.post(t, tc.path, secret, tc.body)
		want := "Duplicate key '" + tc.param + "' in the request body."
		msg := gjson.GetBytes(body, "error.message").Str
		if status != 400 || msg != want {
			t.Errorf("%s %s: %d %s, want 400 %q", tc.path, tc.body, status, body, want)
		}
		if tc.path != "/v1/messages" && gjson.GetBytes(body, "error.param").Str != tc.param {
			t.Errorf("%s: param %q, want %q", tc.path, gjson.GetBytes(body, "error.param").Str, tc.param)
		}
	}
	// A body without repeated keys is served.
	if status, body := b.post(t, "/v1/chat/completions", secret, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"user","content":"hi"}]}`); status != 200 {
		t.Fatalf("a body without repeated keys: %d %s", status, body)
	}
	b.settled(t)
	bal, err := b.store.Balance(t.Context(), u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := 10_000_000 - int64(182_000); bal != want {
		t.Fatalf("balance %d, want %d (one request charged)", bal, want)
	}
}

// TestDuplicateKeyPath: the first repeated key of a JSON document, by its
// path, at any depth; "" when none is repeated.
func TestDuplicateKeyPath(t *testing.T) {
	for body, want := range map[string]string{
		`{}`: "",
		`{"a":1,"b":{"a":1,"b":[{"a":1},{"a":2}]}}`: "",
		`{"a":1,"a":2}`:                                 "a",
		`{"a":{"x":1,"y":2,"x":3}}`:                     "a.x",
		`{"a":[1,{"b":1},{"b":1,"c":[{"d":1,"d":1}]}]}`: "a.2.c.0.d",
		`[{"k":1,"k":2}]`:                               "0.k",
		`{"a\"b":1,"a\"b":2}`:                           `a"b`,
		`{"a.b":1,"a.b":2}`:                             "a.b",
	} {
		got, found := duplicateKeyPath([]byte(body))
		if got != want || found != (want != "") {
			t.Errorf("duplicateKeyPath(%s) = %q, %v; want %q", body, got, found, want)
		}
	}
}

// TestDuplicateKeyPathLargeObject: an object of more keys than smallObject
// is checked by a set: its repeats are found before and past the switch,
// a nested object's keys are its own, and 100,000 distinct keys pass.
func TestDuplicateKeyPathLargeObject(t *testing.T) {
	obj := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString(`{"o":{`)
		for i := range n {
			fmt.Fprintf(&b, `"k%d":{"k%d":1},`, i, i)
		}
		b.WriteString(extra + `}}`)
		return b.String()
	}
	for _, c := range []struct {
		body, want string
	}{
		{obj(100, `"k5":2`), "o.k5"},
		{obj(100, `"k99":2`), "o.k99"},
		{obj(10, `"k3":2`), "o.k3"},
		{obj(100, `"k100":{"a":1,"a":2}`), "o.k100.a"},
		{obj(100_000, `"end":1`), ""},
	} {
		if got, found := duplicateKeyPath([]byte(c.body)); got != c.want || found != (c.want != "") {
			t.Errorf("duplicateKeyPath(%d bytes) = %q, %v; want %q", len(c.body), got, found, c.want)
		}
	}
}

// TestDuplicateKeyPathAllocs: a body without a repeated key costs one
// allocation (the key stack), however many objects it holds.
// hasDuplicateKey is duplicateKeyPath's verdict alone.
func hasDuplicateKey(body []byte) bool {
	_, found := duplicateKeyPath(body)
	return found
}

// TestDuplicateEmptyKey: a repeated empty key is a repeat like any other,
// at the top level too, where its path is "" (the fuzzer found it served):
// refused 400 for every key.
func TestDuplicateEmptyKey(t *testing.T) {
	if p, found := duplicateKeyPath([]byte(`{"":1,"":2}`)); !found || p != "" {
		t.Fatalf(`duplicateKeyPath({"":1,"":2}) = %q, %v; want "", true`, p, found)
	}
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"":1,"":2}`))
	if resp.StatusCode() != 400 || gjson.GetBytes(resp.Body(), "error.message").Str != "Duplicate key '' in the request body." {
		t.Fatalf("repeated empty key: %d %s, want 400 naming it", resp.StatusCode(), resp.Body())
	}
}

func TestDuplicateKeyPathAllocs(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"x"}]},{"role":"user","content":"y"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`)
	if n := testing.AllocsPerRun(100, func() { duplicateKeyPath(body) }); n > 1 {
		t.Fatalf("duplicateKeyPath allocates %v times, want at most 1", n)
	}
}

// FuzzRepeatedKeys checks parseBody's one-pass scan for a user's body
// (translate.ValidWithinKeys) against what parseBody refuses: valid as
// ValidWithin says, and a repeated key reported exactly when
// duplicateKeyPath finds one (a top-level "" key repeated included, with
// the path ""), so that parseBody may skip the search when the scan found
// none.
func FuzzRepeatedKeys(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":[{"c":1,"c":2}]}}`, `{"a":1,"\u0061":2}`, `{"\ud800":1,"\udfff":2}`,
		`[{"a":1},{"a":1}]`, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"a":{},"a":[]}`, `{"a"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid, mayRepeat := translate.ValidWithinKeys(b, maxJSONDepth)
		if valid != translate.ValidWithin(b, maxJSONDepth) {
			t.Fatalf("%q: ValidWithinKeys valid %v, ValidWithin %v", b, valid, !valid)
		}
		if !valid {
			if !mayRepeat {
				t.Fatalf("%q: not valid, yet no repeat reported", b)
			}
			return
		}
		keys := make([]string, 0, 32)
		if p, found := dupIn(gjson.Parse(b2s(b)), &keys); mayRepeat != found {
			t.Fatalf("%q: ValidWithinKeys repeat %v, duplicateKeyPath's search %v %q", b, mayRepeat, found, p)
		}
	})
}

// BenchmarkUserBodyChecks is parseBody's checks of a
// user's 4 KiB Chat body without a repeated key: before, a validating pass
// and duplicateKeyPath's walk; now, translate.ValidWithinKeys alone.
func BenchmarkUserBodyChecks(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You are a helpful assistant. ", 60) +
		`"},{"role":"user","content":"` + strings.Repeat(`Summarise the text below.\n`, 60) + `"},{"role":"assistant","content":"Sure."}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}],` +
		`"max_tokens":256,"temperature":0.2,"stream":false}`)
	b.Run("ValidWithin+duplicateKeyPath", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !translate.ValidWithin(body, maxJSONDepth) || hasDuplicateKey(body) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("ValidWithinKeys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if valid, repeats := translate.ValidWithinKeys(body, maxJSONDepth); !valid || repeats {
				b.Fatal("refused")
			}
		}
	})
}

// TestOperatorKeyRefusesNestedDuplicateKeys: an operator key's body that
// repeats a key at any depth is refused 400 naming its path, as a user's
// is: the gateway reads the first occurrence (routing, estimates, the
// usage record's input estimate) and an upstream's decoder the last, and a
// body is one thing or the other whichever key sends it. Before, an
// operator key's body was refused only for a repeated top-level key.
func TestOperatorKeyRefusesNestedDuplicateKeys(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi","content":"a much longer text"}]}`, "messages.0.content"},
		{"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi","text":"more"}]}]}`, "input.0.content.0.text"},
		{"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y","content":"z"}]}`, "messages.1.content"},
	} {
		resp := do(s, "POST", tc.path, key, []byte(tc.body))
		want := "Duplicate key '" + tc.param + "' in the request body."
		if msg := gjson.GetBytes(resp.Body(), "error.message").Str; resp.StatusCode() != 400 || msg != want {
			t.Errorf("%s %s: %d %s, want 400 %q", tc.path, tc.body, resp.StatusCode(), resp.Body(), want)
		}
	}
}
