package upstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/storage"
)

// CodexEntry is one account read from an import file: its credentials, or
// why the entry was refused. Line is the 1-based line (JSON lines, token
// lists) or element (JSON array) the entry came from.
type CodexEntry struct {
	Line        int
	Credentials storage.Credentials // AccountID, Email and Plan filled from the token claims when the entry had none
	Err         error               // non-nil: the entry was refused; the text names no secret
}

// Import formats (ParseCodexFile detects them; FormatCodexFile writes them).
const (
	FormatAuthJSON = "auth.json" // the Codex CLI's ~/.codex/auth.json (codex-rs/login/src/auth/storage.rs AuthDotJson); several accounts: a JSON array of them
	FormatJSON     = "json"      // a JSON array of {refresh_token, access_token?, id_token?, account_id?, email?, plan?, proxy?}
	FormatJSONL    = "jsonl"     // one such object per line
	FormatTokens   = "tokens"    // one refresh token per line
)

// maxTokenLen bounds one token in an import file: 16 KiB.
const maxTokenLen = 16 << 10

// ParseCodexFile reads codex accounts from data in any of the import
// formats, detected from the content: a JSON object (auth.json or one entry),
// a JSON array (of entries or auth.json objects), JSON lines, or a plain list
// of refresh tokens (one per line; blank lines and lines starting with # are
// skipped). A JSON line that does not parse is refused on its own; the rest
// of the file still counts. It fails only when data as a whole is unusable
// (a JSON array that does not parse).
func ParseCodexFile(data []byte) ([]CodexEntry, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(trimmed) == 0 {
		return nil, errors.New("import: the file is empty")
	}
	switch trimmed[0] {
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(trimmed, &elems); err != nil {
			return nil, fmt.Errorf("import: the JSON array does not parse: %s", jsonErrText(err))
		}
		out := make([]CodexEntry, 0, len(elems))
		for i, e := range elems {
			out = append(out, parseEntry(i+1, e))
		}
		return out, nil
	case '{':
		if json.Valid(trimmed) {
			return []CodexEntry{parseEntry(1, trimmed)}, nil
		}
	}
	var out []CodexEntry
	sc := bufio.NewScanner(bytes.NewReader(trimmed))
	sc.Buffer(make([]byte, 0, 64<<10), maxImportLine)
	n := 1
	for ; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if line[0] == '{' || line[0] == '[' || line[0] == '"' || jsonScalar(line) {
			out = append(out, parseEntry(n, line))
			continue
		}
		out = append(out, tokenEntry(n, string(line)))
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return out, fmt.Errorf("import: line %d is longer than %d MiB; one entry per line", n, maxImportLine>>20)
	} else if err != nil {
		return out, fmt.Errorf("import: %w", err)
	}
	return out, nil
}

// jsonScalar reports whether line is a JSON null, boolean or number: a
// JSON value that is no entry, which parseEntry refuses ("not a JSON
// object"). Read as a refresh token, a body of null (an empty export, a
// script's unset variable) imported an account whose token was "null".
func jsonScalar(line []byte) bool {
	switch string(line) {
	case "null", "true", "false":
		return true
	}
	r := gjson.ParseBytes(line)
	return r.Type == gjson.Number && gjson.ValidBytes(line)
}

// maxImportLine is the longest line of a line-based import file, in bytes.
const maxImportLine = 4 << 20

func tokenEntry(n int, tok string) CodexEntry {
	e := CodexEntry{Line: n}
	if tok == "" {
		e.Err = errors.New("empty refresh token")
		return e
	}
	if err := checkToken("refresh_token", tok); err != nil {
		e.Err = err
		return e
	}
	e.Credentials.RefreshToken = tok
	return e
}

// parseEntry reads one JSON entry: an auth.json object, an entry object, or
// a bare string (a refresh token).
func parseEntry(n int, raw []byte) CodexEntry {
	e := CodexEntry{Line: n}
	if !gjson.ValidBytes(raw) {
		e.Err = errors.New("not valid JSON")
		return e
	}
	r := gjson.ParseBytes(raw)
	if r.Type == gjson.String {
		return tokenEntry(n, r.Str)
	}
	if !r.IsObject() {
		e.Err = errors.New("not a JSON object")
		return e
	}
	src := r
	if t := r.Get("tokens"); t.IsObject() { // auth.json
		src = t
	} else if t.Exists() && t.Type != gjson.Null {
		e.Err = errors.New(`"tokens" is not an object`)
		return e
	} else if r.Get("OPENAI_API_KEY").Type == gjson.String && !r.Get("refresh_token").Exists() {
		e.Err = errors.New("an API-key login (OPENAI_API_KEY), not a ChatGPT login: add it as an openai account")
		return e
	}
	if e.Err = readEntryFields(&e.Credentials, src, r); e.Err == nil {
		e.Err = checkEntry(&e.Credentials)
	}
	return e
}

// readEntryFields reads the credentials' string fields from src, or from
// top beside it (email and plan may sit beside auth.json's "tokens").
func readEntryFields(c *storage.Credentials, src, top gjson.Result) error {
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{"refresh_token", &c.RefreshToken}, {"access_token", &c.AccessToken}, {"id_token", &c.IDToken},
		{"account_id", &c.AccountID}, {"email", &c.Email}, {"plan", &c.Plan}, {"proxy", &c.Proxy},
	} {
		v := src.Get(f.name)
		if !v.Exists() {
			v = top.Get(f.name)
		}
		switch v.Type {
		case gjson.Null:
		case gjson.String:
			*f.dst = strings.TrimSpace(v.Str)
		default:
			return fmt.Errorf("%s is not a string", f.name)
		}
	}
	return nil
}

// checkEntry checks the credentials an entry gave and completes them from
// its tokens' claims: a refresh or access token, a valid proxy, tokens
// that look like tokens, JWTs whose account matches account_id, and,
// without a refresh token, an access token that has not expired. The plan
// is lowercased.
func checkEntry(c *storage.Credentials) error {
	if c.RefreshToken == "" && c.AccessToken == "" {
		return errors.New("no refresh_token (and no access_token)")
	}
	if _, err := ParseProxy(c.Proxy); err != nil {
		return errors.New("proxy: " + err.Error())
	}
	for _, t := range []struct{ name, v string }{{"refresh_token", c.RefreshToken}, {"access_token", c.AccessToken}, {"id_token", c.IDToken}} {
		if t.v == "" {
			continue
		}
		if err := checkToken(t.name, t.v); err != nil {
			return err
		}
	}
	for _, t := range []struct{ name, v string }{{"access_token", c.AccessToken}, {"id_token", c.IDToken}} {
		if t.v == "" {
			continue
		}
		claims, ok := ParseTokenClaims(t.v)
		if !ok {
			return fmt.Errorf("%s is not a JWT", t.name)
		}
		if c.AccountID != "" && claims.AccountID != "" && claims.AccountID != c.AccountID {
			return fmt.Errorf("account_id does not match the %s's chatgpt_account_id", t.name)
		}
		fillFromClaims(c, claims)
	}
	if c.RefreshToken == "" {
		if exp := TokenExpiry(c.AccessToken); !exp.IsZero() && !exp.After(time.Now()) {
			return errors.New("no refresh_token and the access_token has expired")
		}
	}
	c.Plan = strings.ToLower(c.Plan)
	return nil
}

func fillFromClaims(c *storage.Credentials, claims TokenClaims) {
	if c.AccountID == "" {
		c.AccountID = claims.AccountID
	}
	if c.Email == "" {
		c.Email = claims.Email
	}
	if c.Plan == "" {
		c.Plan = claims.Plan
	}
}

// FillFromClaims sets c's AccountID, Email and Plan, where empty, from the
// claims of its id_token and access token.
func FillFromClaims(c *storage.Credentials) {
	for _, tok := range []string{c.IDToken, c.AccessToken} {
		if claims, ok := ParseTokenClaims(tok); ok {
			fillFromClaims(c, claims)
		}
	}
}

func checkToken(name, v string) error {
	if len(v) > maxTokenLen {
		return fmt.Errorf("%s is longer than %d bytes", name, maxTokenLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return fmt.Errorf("%s holds a space or a non-ASCII byte", name)
		}
	}
	return nil
}

// jsonErrText describes a JSON error without quoting the input.
func jsonErrText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	return "not a JSON array"
}

// authDotJSON is the Codex CLI's auth.json (codex-rs/login/src/auth/storage.rs).
type authDotJSON struct {
	AuthMode     string     `json:"auth_mode"`
	OpenAIAPIKey *string    `json:"OPENAI_API_KEY"`
	Tokens       authTokens `json:"tokens"`
	LastRefresh  *time.Time `json:"last_refresh,omitempty"`
}

type authTokens struct {
	IDToken      string `json:"id_token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	AccountID    string `json:"account_id,omitempty"`
}

// exportEntry is one element of the json and jsonl formats.
type exportEntry struct {
	RefreshToken string `json:"refresh_token,omitempty"`
	AccessToken  string `json:"access_token,omitempty"`
	IDToken      string `json:"id_token,omitempty"`
	AccountID    string `json:"account_id,omitempty"`
	Email        string `json:"email,omitempty"`
	Plan         string `json:"plan,omitempty"`
	Proxy        string `json:"proxy,omitempty"`
}

// FormatCodexFile writes creds in format (FormatAuthJSON, FormatJSON,
// FormatJSONL or FormatTokens), readable back by ParseCodexFile. auth.json
// holds one account; with several it is a JSON array of auth.json objects.
// FormatTokens skips accounts without a refresh token. The output holds
// secrets: callers must treat it as such.
func FormatCodexFile(format string, creds []storage.Credentials) ([]byte, error) {
	var buf bytes.Buffer
	switch format {
	case FormatAuthJSON:
		docs := make([]authDotJSON, 0, len(creds))
		for _, c := range creds {
			docs = append(docs, authDotJSON{AuthMode: "chatgpt", Tokens: authTokens{
				IDToken: c.IDToken, AccessToken: c.AccessToken, RefreshToken: c.RefreshToken, AccountID: c.AccountID,
			}})
		}
		var v any = docs
		if len(docs) == 1 {
			v = docs[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	case FormatJSON, FormatJSONL:
		entries := make([]exportEntry, 0, len(creds))
		for _, c := range creds {
			entries = append(entries, exportEntry{c.RefreshToken, c.AccessToken, c.IDToken, c.AccountID, c.Email, c.Plan, c.Proxy})
		}
		if format == FormatJSON {
			b, err := json.MarshalIndent(entries, "", "  ")
			if err != nil {
				return nil, err
			}
			buf.Write(b)
			buf.WriteByte('\n')
			break
		}
		for _, e := range entries {
			b, err := json.Marshal(e)
			if err != nil {
				return nil, err
			}
			buf.Write(b)
			buf.WriteByte('\n')
		}
	case FormatTokens:
		for _, c := range creds {
			if c.RefreshToken != "" {
				buf.WriteString(c.RefreshToken)
				buf.WriteByte('\n')
			}
		}
	default:
		return nil, fmt.Errorf("export: unknown format %q (want %s, %s, %s or %s)", format, FormatAuthJSON, FormatJSON, FormatJSONL, FormatTokens)
	}
	return buf.Bytes(), nil
}
