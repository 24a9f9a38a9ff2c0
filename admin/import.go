package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// ImportOptions shape the accounts an import creates (existing accounts
// keep their own settings; only their credentials change).
type ImportOptions struct {
	NamePrefix     string   // new accounts are named NamePrefix + the first 8 characters of their ChatGPT account id; default "codex-"
	BaseURL        string   // "" is upstream.DefaultCodexBaseURL
	Models         []string // empty: any model
	MaxConcurrency int      // <= 0 means 1
	Group          string
	Tags           []string
	DryRun         bool // report what would happen, store nothing
}

// ImportResult is the outcome of one entry of an import file.
type ImportResult struct {
	Line      int    `json:"line"`                 // line or array element, 1-based
	Status    string `json:"status"`               // imported, updated, unchanged or refused
	Name      string `json:"name,omitempty"`       // the account it went to
	AccountID string `json:"account_id,omitempty"` // ChatGPT account id, when known
	Email     string `json:"email,omitempty"`
	Plan      string `json:"plan,omitempty"`
	Reason    string `json:"reason,omitempty"` // why it was refused; never a secret
}

// ImportReport is the answer of an import: per entry, and totals by status.
type ImportReport struct {
	DryRun  bool           `json:"dry_run"`
	Counts  map[string]int `json:"counts"`
	Entries []ImportResult `json:"entries"`
	// Stored are the accounts as written (none in a dry run), for the
	// caller to apply to a running pool. Never rendered.
	Stored []storage.Account `json:"-"`
}

// ImportAccounts is what an import needs of storage (storage.Accounts).
type ImportAccounts interface {
	ListAccounts(ctx context.Context) ([]storage.Account, error)
	PutAccount(ctx context.Context, a storage.Account) (storage.Account, error)
}

// errImportCredentials refuses an import whose base URL carries credentials.
var errImportCredentials = storage.ErrURLCredentials

// errImportBaseURL refuses an import whose base URL cannot serve.
var errImportBaseURL = errors.New("import: base_url must be an absolute http or https URL, such as https://chatgpt.com/backend-api/codex")

// ImportCodexAccounts reads data in any import format (upstream.ParseCodexFile)
// and stores its accounts as provider codex, de-duplicated by ChatGPT
// account id (an entry without one, a bare refresh token, by its refresh
// token): an entry matching a stored account replaces that account's
// credentials ("updated", or "unchanged" when they are the same), a later
// entry for an account already seen in the file is refused. Credentials are
// sealed by the store. It fails only when data is unusable as a whole or
// storage cannot be listed (or opts.BaseURL is not an absolute http(s) URL);
// a failed write refuses that entry.
func ImportCodexAccounts(ctx context.Context, st ImportAccounts, data []byte, opts ImportOptions) (ImportReport, error) {
	rep := ImportReport{DryRun: opts.DryRun, Counts: map[string]int{"imported": 0, "updated": 0, "unchanged": 0, "refused": 0}}
	if storage.URLHasCredentials(opts.BaseURL) {
		return rep, fmt.Errorf("import: %w", errImportCredentials)
	}
	if opts.BaseURL != "" && !upstream.ValidBaseURL(opts.BaseURL) {
		return rep, errImportBaseURL
	}
	entries, err := upstream.ParseCodexFile(data)
	if err != nil && len(entries) == 0 {
		return rep, err
	}
	existing, err := st.ListAccounts(ctx)
	if err != nil {
		return rep, fmt.Errorf("import: list accounts: %w", err)
	}
	if opts.NamePrefix == "" {
		opts.NamePrefix = "codex-"
	}
	x := newCodexIndex(existing, opts)
	for _, e := range entries {
		r, acc, write := x.plan(e)
		if write && !opts.DryRun {
			stored, err := st.PutAccount(ctx, acc)
			if err != nil {
				r.Status, r.Reason = "refused", "storing it failed: "+storeErrText(err)
			} else {
				rep.Stored = append(rep.Stored, stored)
			}
		}
		rep.Entries = append(rep.Entries, r)
		rep.Counts[r.Status]++
	}
	return rep, nil
}

// codexIndex matches an import's entries with the stored codex accounts and
// names the new ones.
type codexIndex struct {
	opts  ImportOptions
	byKey map[string]storage.Account // "id:" + ChatGPT account id, "rt:" + refresh token
	names map[string]bool            // every stored account's name, and those given to new ones
	seen  map[string]int             // an entry's key → the line that claimed it
}

// newCodexIndex indexes the codex accounts of existing by ChatGPT account id
// (read from the tokens when not stored) and by refresh token.
func newCodexIndex(existing []storage.Account, opts ImportOptions) *codexIndex {
	x := &codexIndex{opts: opts, byKey: map[string]storage.Account{}, names: map[string]bool{}, seen: map[string]int{}}
	for _, a := range existing {
		x.names[a.Name] = true
		if a.Provider != storage.ProviderCodex {
			continue
		}
		c := a.Credentials
		upstream.FillFromClaims(&c)
		if c.AccountID != "" {
			x.byKey["id:"+c.AccountID] = a
		}
		if c.RefreshToken != "" {
			x.byKey["rt:"+c.RefreshToken] = a
		}
	}
	return x
}

// plan decides what entry e does: refused (a bad entry, or a repeat of an
// earlier entry's account), unchanged (the stored account has these
// tokens), updated (a stored account gets its credentials) or imported (a
// new account). It returns the entry's result and, when write is set, the
// account to store.
func (x *codexIndex) plan(e upstream.CodexEntry) (r ImportResult, acc storage.Account, write bool) {
	c := e.Credentials
	r = ImportResult{Line: e.Line, AccountID: c.AccountID, Email: c.Email, Plan: c.Plan}
	if e.Err != nil {
		r.Status, r.Reason = "refused", e.Err.Error()
		return r, acc, false
	}
	key := "rt:" + c.RefreshToken
	if c.AccountID != "" {
		key = "id:" + c.AccountID
	}
	if line, dup := x.seen[key]; dup {
		r.Status, r.Reason = "refused", fmt.Sprintf("duplicate of entry %d", line)
		return r, acc, false
	}
	x.seen[key] = e.Line
	acc, found := x.byKey[key]
	if !found && c.RefreshToken != "" {
		acc, found = x.byKey["rt:"+c.RefreshToken]
	}
	if !found {
		acc = storage.Account{
			Name: uniqueName(x.names, x.opts.NamePrefix+nameStem(c)), Provider: storage.ProviderCodex, BaseURL: x.opts.BaseURL,
			Credentials: c, Models: x.opts.Models, MaxConcurrency: x.opts.MaxConcurrency, Group: x.opts.Group, Tags: x.opts.Tags,
		}
		x.names[acc.Name] = true
		r.Name, r.Status = acc.Name, "imported"
		return r, acc, true
	}
	r.Name = acc.Name
	if acc.Credentials.RefreshToken == c.RefreshToken && acc.Credentials.AccessToken == c.AccessToken {
		r.Status = "unchanged"
		return r, acc, false
	}
	if c.Proxy == "" {
		c.Proxy = acc.Credentials.Proxy
	}
	acc.Credentials = c
	r.Status = "updated"
	return r, acc, true
}

// nameStem is the distinguishing part of a new account's name: the start of
// its ChatGPT account id, else of a digest of its refresh token (never the
// token itself).
func nameStem(c storage.Credentials) string {
	if id := strings.ReplaceAll(c.AccountID, "-", ""); len(id) >= 8 {
		return strings.ToLower(id[:8])
	} else if id != "" {
		return strings.ToLower(id)
	}
	sum := sha256.Sum256([]byte(c.RefreshToken))
	return "rt" + hex.EncodeToString(sum[:4])
}

func uniqueName(names map[string]bool, name string) string {
	if !names[name] {
		return name
	}
	for i := 2; ; i++ {
		if n := name + "-" + strconv.Itoa(i); !names[n] {
			return n
		}
	}
}

// storeErrText names a storage failure by its class, not its text (which
// could quote a value).
func storeErrText(err error) string {
	switch {
	case errors.Is(err, storage.ErrConflict):
		return "name or id taken"
	case errors.Is(err, storage.ErrInvalid):
		return "invalid account"
	}
	return "storage error"
}

// ExportCodexAccounts writes the codex accounts (all, or those named in
// names) in format (upstream.FormatCodexFile). The output holds secrets.
func ExportCodexAccounts(ctx context.Context, st ImportAccounts, format string, names []string) ([]byte, int, error) {
	accs, err := st.ListAccounts(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("export: list accounts: %w", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var creds []storage.Credentials
	for _, a := range accs {
		if a.Provider != storage.ProviderCodex || (len(want) > 0 && !want[a.Name] && !want[a.ID]) {
			continue
		}
		creds = append(creds, a.Credentials)
	}
	b, err := upstream.FormatCodexFile(format, creds)
	return b, len(creds), err
}

// adminAccountsIO serves POST /api/admin/accounts/import and GET
// /api/admin/accounts/export in the Codex formats.
func (s *Server) adminAccountsIO(ctx *fasthttp.RequestCtx, method, op string) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // bounded; not tied to the connection
	defer cancel()
	switch {
	case op == "import" && method == "POST":
		s.importCodex(ctx, sctx)
	case op == "export" && method == "GET":
		s.exportCodex(ctx, sctx)
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	}
}

// importCodex serves POST /api/admin/accounts/import (ImportCodexAccounts):
// the body is the file; query: dry_run, name_prefix, base_url, models,
// max_concurrency, group, tags. The stored accounts join the pool at once.
func (s *Server) importCodex(ctx *fasthttp.RequestCtx, sctx context.Context) {
	q := ctx.QueryArgs()
	// The Codex formats are detected from the content; any other format
	// is refused rather than read as one of them (format=troupe is routed
	// to importAccounts before this).
	switch f := string(q.Peek("format")); f {
	case "", upstream.FormatAuthJSON, upstream.FormatJSON, upstream.FormatJSONL, upstream.FormatTokens:
	default:
		writeError(ctx, errBadParam("format", "Unknown import format "+strconv.Quote(clip(f))+": troupe, auth.json, json, jsonl or tokens (or none: detected from the file)."))
		return
	}
	opts := ImportOptions{
		DryRun: q.GetBool("dry_run"), NamePrefix: string(q.Peek("name_prefix")), BaseURL: string(q.Peek("base_url")),
		Group: string(q.Peek("group")), Models: splitQueryList(q.Peek("models")), Tags: splitQueryList(q.Peek("tags")),
		MaxConcurrency: storage.DefaultMaxConcurrency, // as troupe accounts import's default
	}
	if v := q.Peek("max_concurrency"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 0 {
			writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Param: "max_concurrency", Message: "max_concurrency must be a non-negative integer."})
			return
		}
		opts.MaxConcurrency = n
	}
	rep, err := ImportCodexAccounts(sctx, s.store, ctx.PostBody(), opts)
	if errors.Is(err, errImportBaseURL) || errors.Is(err, errImportCredentials) {
		writeError(ctx, errBadParam("base_url", err.Error()))
		return
	}
	if err != nil {
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_import", Message: err.Error()})
		return
	}
	for _, a := range rep.Stored {
		s.sys.PutAccount(a) // join the pool now, not at the next storage sync
	}
	s.log.Info("accounts imported", "imported", rep.Counts["imported"], "updated", rep.Counts["updated"],
		"unchanged", rep.Counts["unchanged"], "refused", rep.Counts["refused"], "dry_run", rep.DryRun)
	writeJSON(ctx, 200, rep)
}

// exportCodex serves GET /api/admin/accounts/export (ExportCodexAccounts):
// query format = auth.json, json, jsonl or tokens (default jsonl); name,
// repeatable (default every codex account). The answer holds secrets.
func (s *Server) exportCodex(ctx *fasthttp.RequestCtx, sctx context.Context) {
	q := ctx.QueryArgs()
	format := string(q.Peek("format"))
	if format == "" {
		format = upstream.FormatJSONL
	}
	var names []string
	for _, v := range q.PeekMulti("name") {
		names = append(names, string(v))
	}
	b, n, err := ExportCodexAccounts(sctx, s.store, format, names)
	if err != nil {
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Param: "format", Message: err.Error()})
		return
	}
	s.log.Info("accounts exported", "accounts", n, "format", format)
	if format == upstream.FormatTokens {
		ctx.SetContentType("text/plain; charset=utf-8")
	} else {
		ctx.SetContentType("application/json")
	}
	ctx.Response.Header.Set("Content-Disposition", `attachment; filename="codex-accounts.`+strings.TrimPrefix(format, "auth.")+`"`)
	ctx.SetBody(b)
}

// splitQueryList splits a comma-separated query value into its non-empty,
// trimmed items.
func splitQueryList(b []byte) []string {
	var out []string
	for item := range strings.SplitSeq(string(b), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
