package upstream

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// testJWT builds an unsigned JWT with the fixture's claim layout.
func testJWT(accountID, email, plan string, exp time.Time) string {
	claims := map[string]any{
		"exp": exp.Unix(), "email": email,
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": accountID, "chatgpt_plan_type": plan},
	}
	p, _ := json.Marshal(claims)
	return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(p) + ".sig"
}

func TestParseTokenClaimsFixture(t *testing.T) {
	payload := testdata(t, "codex/id-token-claims.json")
	tok := "h." + base64.RawURLEncoding.EncodeToString(payload) + ".s"
	c, ok := ParseTokenClaims(tok)
	if !ok || c.AccountID != "00000000-0000-4000-8000-000000000000" || c.Plan != "pro" || c.Email != "user@example.com" || c.Expires.Unix() != 1790000000 {
		t.Fatalf("%v %+v", ok, c)
	}
	for _, bad := range []string{"", "a.b", "a.!!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".c"} {
		if _, ok := ParseTokenClaims(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

func TestParseCodexFileFormats(t *testing.T) {
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Hour)
	at := testJWT("acc-1", "a@example.com", "plus", future)

	// auth.json, as the Codex CLI writes it (fixture with the placeholders replaced).
	auth := strings.NewReplacer(`"<JWT>"`, `"`+at+`"`, "<REFRESH_TOKEN>", "rt_1", "00000000-0000-4000-8000-000000000000", "acc-1").
		Replace(string(testdata(t, "codex/auth.json.example")))
	es, err := ParseCodexFile([]byte(auth))
	if err != nil || len(es) != 1 || es[0].Err != nil {
		t.Fatalf("auth.json: %v %+v", err, es)
	}
	if c := es[0].Credentials; c.RefreshToken != "rt_1" || c.AccountID != "acc-1" || c.Email != "a@example.com" || c.Plan != "plus" || c.AccessToken != at {
		t.Fatalf("auth.json credentials: %+v", c)
	}

	// A JSON array with good and malformed entries.
	arr := `[
	  {"refresh_token":"rt_2","email":"b@example.com","plan":"Pro","account_id":"acc-2"},
	  {"access_token":"` + at + `"},
	  {"email":"nobody@example.com"},
	  {"refresh_token":42},
	  "rt_3",
	  [1,2],
	  {"refresh_token":"has space"},
	  {"refresh_token":"rt_4","access_token":"not-a-jwt"},
	  {"refresh_token":"rt_5","account_id":"acc-other","access_token":"` + at + `"},
	  {"access_token":"` + testJWT("acc-9", "", "", past) + `"},
	  {"OPENAI_API_KEY":"sk-x","tokens":null}
	]`
	es, err = ParseCodexFile([]byte(arr))
	if err != nil || len(es) != 11 {
		t.Fatalf("array: %v, %d entries", err, len(es))
	}
	wantErr := []string{"", "", "no refresh_token", "refresh_token is not a string", "", "not a JSON object", "space", "access_token is not a JWT",
		"does not match", "expired", "API-key login"}
	for i, e := range es {
		if e.Line != i+1 {
			t.Errorf("entry %d: line %d", i, e.Line)
		}
		if wantErr[i] == "" {
			if e.Err != nil {
				t.Errorf("entry %d: %v", i+1, e.Err)
			}
			continue
		}
		if e.Err == nil || !strings.Contains(e.Err.Error(), wantErr[i]) {
			t.Errorf("entry %d: err %v, want %q", i+1, e.Err, wantErr[i])
		}
		if e.Err != nil && strings.Contains(e.Err.Error(), "rt_") {
			t.Errorf("entry %d: error quotes a token: %v", i+1, e.Err)
		}
	}
	if es[0].Credentials.Plan != "pro" || es[4].Credentials.RefreshToken != "rt_3" || es[1].Credentials.AccountID != "acc-1" {
		t.Fatalf("array values: %+v %+v %+v", es[0].Credentials, es[4].Credentials, es[1].Credentials)
	}

	// JSON lines, with a broken line in the middle.
	jsonl := "{\"refresh_token\":\"rt_6\"}\n{\"refresh_token\": \n\n{\"refresh_token\":\"rt_7\",\"account_id\":\"acc-7\"}\n"
	es, err = ParseCodexFile([]byte(jsonl))
	if err != nil || len(es) != 3 || es[0].Err != nil || es[1].Err == nil || es[2].Err != nil || es[2].Line != 4 {
		t.Fatalf("jsonl: %v %+v", err, es)
	}

	// A plain token list with comments and blanks.
	es, err = ParseCodexFile([]byte("# exported\nrt_8\n\n  rt_9  \n"))
	if err != nil || len(es) != 2 || es[0].Credentials.RefreshToken != "rt_8" || es[1].Credentials.RefreshToken != "rt_9" || es[1].Line != 4 {
		t.Fatalf("tokens: %v %+v", err, es)
	}

	for _, bad := range []string{"", "  \n", "[1,"} {
		if _, err := ParseCodexFile([]byte(bad)); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

func TestFormatCodexFileRoundTrip(t *testing.T) {
	at := testJWT("acc-1", "a@example.com", "plus", time.Now().Add(time.Hour))
	creds := []storage.Credentials{
		{RefreshToken: "rt_1", AccessToken: at, IDToken: at, AccountID: "acc-1", Email: "a@example.com", Plan: "plus"},
		{RefreshToken: "rt_2", AccountID: "acc-2", Email: "b@example.com", Plan: "pro"},
	}
	for _, f := range []string{FormatAuthJSON, FormatJSON, FormatJSONL, FormatTokens} {
		b, err := FormatCodexFile(f, creds)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		es, err := ParseCodexFile(b)
		if err != nil || len(es) != 2 {
			t.Fatalf("%s: %v %d\n%s", f, err, len(es), b)
		}
		for i, e := range es {
			if e.Err != nil || e.Credentials.RefreshToken != creds[i].RefreshToken {
				t.Fatalf("%s entry %d: %+v", f, i, e)
			}
			if f != FormatTokens && e.Credentials.AccountID != creds[i].AccountID {
				t.Fatalf("%s entry %d: account %q", f, i, e.Credentials.AccountID)
			}
			if (f == FormatJSON || f == FormatJSONL) && e.Credentials != creds[i] {
				t.Fatalf("%s entry %d: %+v, want %+v", f, i, e.Credentials, creds[i])
			}
		}
	}
	one, _ := FormatCodexFile(FormatAuthJSON, creds[:1])
	if !strings.HasPrefix(string(one), "{") || !strings.Contains(string(one), `"auth_mode": "chatgpt"`) {
		t.Fatalf("single auth.json: %s", one)
	}
	if _, err := FormatCodexFile("xml", creds); err == nil {
		t.Fatal("unknown format: no error")
	}
}

func FuzzParseCodexFile(f *testing.F) {
	f.Add([]byte(`[{"refresh_token":"rt_1"},"rt_2"]`))
	f.Add([]byte("{\"tokens\":{\"refresh_token\":\"x\"}}"))
	f.Add([]byte("rt_1\n{\"refresh_token\":\"rt_2\"}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, _ := ParseCodexFile(b)
		for _, e := range es {
			if e.Err == nil && e.Credentials.RefreshToken == "" && e.Credentials.AccessToken == "" {
				t.Fatalf("entry without a token accepted: %+v", e)
			}
		}
	})
}

// A line over the limit is refused by its number, not with bufio's words.
func TestParseCodexFileLongLine(t *testing.T) {
	body := "rt-one\n# a comment\n" + strings.Repeat("x", maxImportLine+1) + "\n"
	_, err := ParseCodexFile([]byte(body))
	if err == nil || err.Error() != "import: line 3 is longer than 4 MiB; one entry per line" {
		t.Fatalf("err = %v", err)
	}
}

// A line that is a JSON null, boolean or number is no entry and no refresh
// token: it is refused ("not a JSON object"), as a JSON array's element of
// that kind is. A body of null imported an account whose refresh token was
// "null" (found by posting null to /api/admin/accounts/import).
func TestParseCodexFileScalarRefused(t *testing.T) {
	for _, body := range []string{"null", "true", "false", "42", "-1.5e3", "null\nrt-two"} {
		es, err := ParseCodexFile([]byte(body))
		if err != nil || len(es) == 0 {
			t.Fatalf("%q: %v %+v", body, err, es)
		}
		if es[0].Err == nil || es[0].Err.Error() != "not a JSON object" || es[0].Credentials.RefreshToken != "" {
			t.Errorf("%q: first entry %+v, want refused as not a JSON object", body, es[0])
		}
	}
	if es, _ := ParseCodexFile([]byte("null\nrt-two")); len(es) != 2 || es[1].Err != nil || es[1].Credentials.RefreshToken != "rt-two" {
		t.Errorf("the token after a null line: %+v", es)
	}
	if es, _ := ParseCodexFile([]byte("nullable-token\n123abc")); len(es) != 2 || es[0].Err != nil || es[1].Err != nil {
		t.Errorf("tokens that merely start like a JSON scalar: %+v", es)
	}
}
