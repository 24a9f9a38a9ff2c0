package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/hygiene"
	"github.com/troupe-gw/troupe/stats"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// credentialsSet tells which credential fields an account has, never their values.
type credentialsSet struct {
	APIKey       bool `json:"api_key"`
	AccessToken  bool `json:"access_token"`
	RefreshToken bool `json:"refresh_token"`
	IDToken      bool `json:"id_token"`
	AccountID    bool `json:"account_id"`
}

// liveJSON is an account's state as its actor and the scheduler see it now.
type liveJSON struct {
	Status            string       `json:"status"` // active, cooling, disabled, unauthorized, banned; "absent" when not in this instance's pool
	InFlight          int          `json:"inflight"`
	MaxInFlight       int          `json:"max_inflight"`
	CooldownUntil     *time.Time   `json:"cooldown_until"`
	CooldownReason    string       `json:"cooldown_reason"`
	CooldownRemaining float64      `json:"cooldown_remaining_seconds"`
	Tier              string       `json:"tier"` // healthy, warm, risky, excluded; "" when not scored yet
	Score             *float64     `json:"score"`
	Requests          uint64       `json:"requests"`
	Successes         uint64       `json:"successes"`
	Failures          uint64       `json:"failures"`
	SuccessStreak     int          `json:"success_streak"`
	FailureStreak     int          `json:"failure_streak"`
	EWMASuccess       float64      `json:"ewma_success"`
	EWMALatencyMs     float64      `json:"ewma_latency_ms"`
	EWMATTFTMs        float64      `json:"ewma_ttft_ms"`
	Windows           []windowJSON `json:"usage_windows"`
	Plan              string       `json:"plan,omitempty"`
	// The upstream's other limits (Codex: x-codex-active-limit,
	// x-codex-credits-*, x-codex-<family>-*; docs/codex.md#usage-limits).
	ActiveLimit string       `json:"active_limit,omitempty"`
	Credits     *creditsJSON `json:"credits,omitempty"`
	Families    []familyJSON `json:"limit_families"`
}

// creditsJSON is an account's purchased credits as the upstream reported them.
type creditsJSON struct {
	HasCredits bool   `json:"has_credits"`
	Unlimited  bool   `json:"unlimited"`
	Balance    string `json:"balance"`
}

// familyJSON is one per-model limit of an account: while it is used up
// (cooling_until set) the account is not offered for its models.
type familyJSON struct {
	ID           string       `json:"id"`
	LimitName    string       `json:"limit_name"`
	Models       []string     `json:"models"`
	Windows      []windowJSON `json:"usage_windows"`
	CoolingUntil *time.Time   `json:"cooling_until"`
}

// windowJSON is one upstream usage window (e.g. Codex's 5-hour window).
type windowJSON struct {
	Name          string     `json:"name"`
	UsedPercent   float64    `json:"used_percent"`
	WindowMinutes int        `json:"window_minutes"`
	ResetsAt      *time.Time `json:"resets_at"`
}

// accountJSON is an account as the admin API shows it: configuration,
// which credentials are set (never their values) and the live state.
type accountJSON struct {
	ID             string         `json:"id"`
	Name           string         `json:"name"`
	Provider       string         `json:"provider"`
	BaseURL        string         `json:"base_url"`
	Models         []string       `json:"models"`
	MaxConcurrency int            `json:"max_concurrency"`
	Group          string         `json:"group"`
	Tags           []string       `json:"tags"`
	Priority       int            `json:"priority"`
	Disabled       bool           `json:"disabled"`
	Credentials    credentialsSet `json:"credentials"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      time.Time      `json:"updated_at"`
	// Version is the account's version (storage.Account.Version): send it
	// back in a PATCH or an import entry to have the write refused with 409
	// edit_conflict if the account changed since (docs/admin-api.md,
	// "Concurrent edits").
	Version int64    `json:"version"`
	Live    liveJSON `json:"live"`
	// Stats1h is the account's attempts over the last hour (package stats;
	// absent without attempts, or in answers other than the list).
	Stats1h *stats.Brief `json:"stats_1h,omitempty"`
	// Hygiene is why the account hygiene rule flagged or disabled it
	// (the list and GET of one account; absent when it did not).
	Hygiene *hygiene.Flag `json:"hygiene,omitempty"`
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func credSet(c storage.Credentials) credentialsSet {
	return credentialsSet{c.APIKey != "", c.AccessToken != "", c.RefreshToken != "", c.IDToken != "", c.AccountID != ""}
}

func toAccountJSON(a storage.Account, v *actors.View, sc *actors.Scored, now time.Time) accountJSON {
	j := accountJSON{ID: a.ID, Name: a.Name, Provider: string(a.Provider), BaseURL: storage.RedactURL(a.BaseURL), Models: nonNil(a.Models),
		MaxConcurrency: a.MaxConcurrency, Group: a.Group, Tags: nonNil(a.Tags), Priority: a.Priority, Disabled: a.Disabled,
		Credentials: credSet(a.Credentials), CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, Version: a.Version}
	j.Live = liveOf(v, sc, now)
	return j
}

func liveOf(v *actors.View, sc *actors.Scored, now time.Time) liveJSON {
	if v == nil {
		return liveJSON{Status: "absent", Windows: []windowJSON{}, Families: []familyJSON{}}
	}
	l := liveJSON{Status: v.Status.String(), InFlight: v.InFlight, MaxInFlight: v.MaxInFlight, CooldownReason: v.CooldownReason,
		Requests: v.Requests, Successes: v.Successes, Failures: v.Failures, SuccessStreak: v.SuccessStreak, FailureStreak: v.FailureStreak,
		EWMASuccess: v.EWMASuccess, EWMALatencyMs: float64(v.EWMALatency) / 1e6, EWMATTFTMs: float64(v.EWMATTFT) / 1e6,
		Plan: v.Plan, Windows: windowsJSON(v.Windows), ActiveLimit: v.ActiveLimit, Families: make([]familyJSON, 0, len(v.Families))}
	if v.Status == actors.StatusCooling && !v.CooldownUntil.IsZero() {
		t := v.CooldownUntil.UTC()
		l.CooldownUntil = &t
		l.CooldownRemaining = max(v.CooldownUntil.Sub(now).Seconds(), 0)
	}
	if c := v.Credits; c != nil {
		l.Credits = &creditsJSON{HasCredits: c.HasCredits, Unlimited: c.Unlimited, Balance: c.Balance}
	}
	for _, f := range v.Families {
		fj := familyJSON{ID: f.ID, LimitName: f.LimitName, Models: nonNil(f.Models), Windows: windowsJSON(f.Windows)}
		if f.CoolingUntil.After(now) {
			t := f.CoolingUntil.UTC()
			fj.CoolingUntil = &t
		}
		l.Families = append(l.Families, fj)
	}
	if sc != nil {
		if sc.OK {
			score := sc.Score
			l.Score = &score
			l.Tier = sc.Tier.String()
		} else {
			l.Tier = "excluded"
		}
	}
	return l
}

// accountFilter is the query of GET /api/admin/accounts.
type accountFilter struct {
	q, status, provider, group, model, tier string
	sort                                    string
	desc                                    bool
	offset, limit                           int
}

// parseAccountFilter reads the list's query. A filter value that no account
// can have (status, tier, provider), like an unknown sort or order, is a 400
// naming the parameter rather than an empty page that reads as "none".
func parseAccountFilter(a *fasthttp.Args) (accountFilter, *APIError) {
	f := accountFilter{q: strings.ToLower(string(a.Peek("q"))), status: string(a.Peek("status")), provider: string(a.Peek("provider")),
		group: string(a.Peek("group")), model: string(a.Peek("model")), tier: string(a.Peek("tier")), sort: string(a.Peek("sort")),
		desc: string(a.Peek("order")) == "desc", limit: 50}
	var err *APIError
	if f.offset, err = intArg(a, "offset", 0, 0, 1<<30); err != nil {
		return f, err
	}
	if f.limit, err = intArg(a, "limit", 50, 1, 1000); err != nil {
		return f, err
	}
	switch f.status {
	case "", "active", "cooling", "disabled", "unauthorized", "banned", "absent":
	default:
		return f, errBadParam("status", "status is one of active, cooling, disabled, unauthorized, banned, absent.")
	}
	switch f.tier {
	case "", "healthy", "warm", "risky", "excluded":
	default:
		return f, errBadParam("tier", "tier is one of healthy, warm, risky, excluded.")
	}
	if f.provider != "" && !storage.Provider(f.provider).Valid() {
		return f, errBadParam("provider", "provider is one of codex, openai, openai_compat, anthropic.")
	}
	switch f.sort {
	case "", "name", "status", "inflight", "score", "requests", "failures", "cooldown", "provider", "priority", "created_at", "windows",
		"success_rate", "latency_p95":
	default:
		return f, errBadParam("sort", "sort is one of name, status, inflight, score, requests, failures, cooldown, provider, priority, created_at, windows, success_rate, latency_p95.")
	}
	switch string(a.Peek("order")) {
	case "", "asc", "desc":
	default:
		return f, errBadParam("order", "order is asc or desc.")
	}
	return f, nil
}

// intArg parses the integer query parameter name (def when absent) within [lo, hi].
func intArg(a *fasthttp.Args, name string, def, lo, hi int) (int, *APIError) {
	v := a.Peek(name)
	if len(v) == 0 {
		return def, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < lo || n > hi {
		return 0, errBadParam(name, name+" must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi)+".")
	}
	return n, nil
}

type accountRow struct {
	a  storage.Account
	v  *actors.View
	sc *actors.Scored
	st *stats.Brief // the last hour's attempts; nil without any (or unless sorting by them)
}

func (f *accountFilter) keep(r *accountRow) bool {
	a := &r.a
	if f.q != "" && !strings.Contains(strings.ToLower(a.Name), f.q) && !strings.Contains(a.ID, f.q) &&
		!slices.ContainsFunc(a.Tags, func(t string) bool { return strings.Contains(strings.ToLower(t), f.q) }) {
		return false
	}
	if f.provider != "" && string(a.Provider) != f.provider {
		return false
	}
	if f.group != "" && a.Group != f.group {
		return false
	}
	if f.model != "" && len(a.Models) > 0 && !slices.Contains(a.Models, f.model) {
		return false
	}
	if f.status != "" && statusOf(r.v) != f.status {
		return false
	}
	if f.tier != "" {
		tier := ""
		if r.sc != nil {
			tier = "excluded"
			if r.sc.OK {
				tier = r.sc.Tier.String()
			}
		}
		if tier != f.tier {
			return false
		}
	}
	return true
}

func (f *accountFilter) compare(x, y *accountRow) int {
	num := func(r *accountRow) float64 {
		v := r.v
		switch f.sort {
		case "inflight":
			if v != nil {
				return float64(v.InFlight)
			}
		case "score":
			if r.sc != nil && r.sc.OK {
				return r.sc.Score - float64(r.sc.Tier)*1e12 // tier first, then score
			}
			return -1e18
		case "requests":
			if v != nil {
				return float64(v.Requests)
			}
		case "failures":
			if v != nil {
				return float64(v.Failures)
			}
		case "cooldown":
			if v != nil && v.Status == actors.StatusCooling {
				return float64(v.CooldownUntil.UnixMilli())
			}
		case "priority":
			return float64(r.a.Priority)
		case "windows": // the most used usage window; accounts reporting none first
			used := -1.0
			if v != nil {
				for _, w := range v.Windows {
					used = max(used, w.UsedPercent)
				}
			}
			return used
		case "created_at":
			return float64(r.a.CreatedAt.UnixMilli())
		case "success_rate": // accounts without attempts last, after the healthy ones
			if r.st != nil {
				return r.st.SuccessRate
			}
			return 2
		case "latency_p95": // accounts without attempts first, before the fastest
			if r.st != nil {
				return r.st.P95ms
			}
			return -1
		}
		return 0
	}
	var c int
	switch f.sort {
	case "", "name":
	case "status":
		c = strings.Compare(statusOf(x.v), statusOf(y.v))
	case "provider":
		c = strings.Compare(string(x.a.Provider), string(y.a.Provider))
	default:
		c = cmp.Compare(num(x), num(y))
	}
	if c == 0 {
		c = strings.Compare(x.a.Name, y.a.Name)
	}
	if f.desc {
		c = -c
	}
	return c
}

// liveIndex returns the pool's views and policy verdicts by account ID.
func (s *Server) liveIndex(ctx context.Context) (map[string]*actors.View, map[string]actors.Scored) {
	byID := make(map[string]*actors.View, 1024)
	s.sys.EachView(func(v *actors.View) { byID[v.ID] = v })
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	scores, err := s.sys.Scores(sctx)
	if err != nil {
		s.log.Warn("admin: scheduler scores", "err", err)
	}
	return byID, scores
}

// adminAccounts serves /api/admin/accounts (docs/admin-api.md, "Accounts").
func (s *Server) adminAccounts(ctx *fasthttp.RequestCtx, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case len(parts) == 0 && method == "GET":
		s.listAccounts(ctx, rctx)
	case len(parts) == 0 && method == "POST":
		s.createAccount(ctx, rctx)
	case len(parts) == 1 && (parts[0] == "import" || parts[0] == "export") && string(ctx.QueryArgs().Peek("format")) != "troupe":
		// The Codex formats (auth.json, JSON lines, refresh tokens): import.go.
		defer s.accountsChanged()
		s.adminAccountsIO(ctx, method, parts[0])
	case len(parts) == 1 && parts[0] == "export" && method == "GET":
		s.exportAccounts(ctx, rctx)
	case len(parts) == 1 && parts[0] == "import" && method == "POST":
		s.importAccounts(ctx, rctx)
	case len(parts) == 1 && parts[0] == "bulk" && method == "POST":
		s.bulkAccounts(ctx, rctx)
	case len(parts) == 1 && method == "GET":
		s.getAccount(ctx, rctx, parts[0])
	case len(parts) == 1 && (method == "PATCH" || method == "PUT"):
		s.editAccount(ctx, rctx, parts[0])
	case len(parts) == 1 && method == "DELETE":
		s.deleteAccount(ctx, rctx, parts[0])
	case len(parts) == 2 && (parts[1] == "enable" || parts[1] == "disable") && method == "POST":
		s.enableAccount(ctx, rctx, parts[0], parts[1] == "enable")
	case len(parts) == 2 && parts[1] == "restore" && method == "POST":
		s.restoreAccount(ctx, rctx, parts[0])
	case len(parts) == 2 && parts[1] == "probe" && method == "POST":
		s.probe(ctx, rctx, parts[0])
	case len(parts) == 2 && parts[1] == "stats" && method == "GET":
		s.accountStats(ctx, rctx, parts[0])
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	}
}

// createAccount serves POST /api/admin/accounts: an account object (create:
// absent fields take their zero value), refused with 409 when the name is
// taken; the account joins the pool at once.
func (s *Server) createAccount(ctx *fasthttp.RequestCtx, rctx context.Context) {
	in, aerr := decodeAccountInput(ctx.PostBody())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if _, err := s.store.GetAccount(rctx, in.Name); err == nil {
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Param: "name", Message: "An account with this name exists."})
		return
	}
	// A new account without max_concurrency gets the default, as from the
	// config file and the CLI; an explicit 0 still means 1.
	a, aerr := in.account(storage.Account{MaxConcurrency: storage.DefaultMaxConcurrency})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	stored, err := s.store.PutAccount(rctx, a)
	if err != nil {
		s.accountStorageError(ctx, err)
		return
	}
	s.accountsChanged()
	s.sys.PutAccount(stored)
	s.log.Info("admin: account added", "account", stored.Name)
	writeJSON(ctx, 201, toAccountJSON(stored, nil, nil, s.now()))
}

// getAccount serves GET /api/admin/accounts/{id or name}: the account with
// its live state.
func (s *Server) getAccount(ctx *fasthttp.RequestCtx, rctx context.Context, id string) {
	a, err := s.store.GetAccount(rctx, id)
	if err != nil {
		s.accountStorageError(ctx, err)
		return
	}
	views, scores := s.liveIndex(rctx)
	out := toAccountJSON(a, viewPtr(views, a.ID), scorePtr(scores, a.ID), s.now())
	out.Hygiene = s.hygieneFlag(rctx, a.ID)
	writeJSON(ctx, 200, out)
}

// editAccount serves PATCH (or PUT) /api/admin/accounts/{id or name}: the
// fields given change, absent ones keep their value; the name cannot.
//
// The write is conditional on the version read (storage.Account.IfVersion).
// With "version" in the body (the version the editor read, as GET answers
// it) an account changed since is a 409 edit_conflict and nothing is
// written. Without it, a change stored by someone else between this read
// and this write (another instance) makes the edit read and apply again,
// so the fields given are applied onto the latest account.
func (s *Server) editAccount(ctx *fasthttp.RequestCtx, rctx context.Context, id string) {
	var in accountInput
	body := bytes.TrimSpace(ctx.PostBody())
	if len(body) == 0 || body[0] != '{' {
		writeError(ctx, errBadParam("body", "The body must be a JSON object of account fields."))
		return
	}
	// Strict, as on create: a misspelt field is a 400 naming it, not an
	// edit that changes nothing in silence.
	if err := decodeStrict(body, &in); err != nil {
		writeError(ctx, errBadParam("body", "The body must be a JSON object of account fields: "+jsonDecodeError(err)))
		return
	}
	for attempt := 1; ; attempt++ {
		a, unlock, err := s.lockAccount(rctx, id)
		if err != nil {
			s.accountStorageError(ctx, err)
			return
		}
		if in.Version != nil && *in.Version != a.Version {
			unlock()
			writeError(ctx, errEditConflict("account", a.Name, *in.Version, a.Version))
			return
		}
		if in.Name != "" && in.Name != a.Name {
			unlock()
			writeError(ctx, errBadParam("name", "An account's name cannot change; add a new account and delete this one."))
			return
		}
		in.Name = a.Name
		upd, aerr := in.account(a)
		if aerr != nil {
			unlock()
			writeError(ctx, aerr)
			return
		}
		upd.IfVersion = a.Version
		stale := !s.putAccount(ctx, rctx, upd, 200, in.Version == nil && attempt < maxEditAttempts)
		unlock()
		if !stale {
			return
		}
	}
}

// deleteAccount serves DELETE /api/admin/accounts/{id or name}; the account
// leaves the pool at once.
func (s *Server) deleteAccount(ctx *fasthttp.RequestCtx, rctx context.Context, id string) {
	a, err := s.store.GetAccount(rctx, id)
	if err == nil {
		err = s.store.DeleteAccount(rctx, a.ID)
	}
	if err != nil {
		s.accountStorageError(ctx, err)
		return
	}
	s.accountsChanged()
	s.sys.RemoveAccount(a.ID)
	s.stats.Forget(a.ID)
	s.log.Info("admin: account deleted", "account", a.Name)
	writeJSON(ctx, 200, map[string]any{"deleted": a.ID, "name": a.Name})
}

// enableAccount serves POST /api/admin/accounts/{id or name}/enable and
// …/disable.
func (s *Server) enableAccount(ctx *fasthttp.RequestCtx, rctx context.Context, id string, enable bool) {
	s.enableAccountAttempt(ctx, rctx, id, enable, 1)
}

// enableAccountAttempt is enableAccount's attempt number attempt: its
// write is conditional on the account as read, and read again when
// another instance changed it meanwhile (editAccount).
func (s *Server) enableAccountAttempt(ctx *fasthttp.RequestCtx, rctx context.Context, id string, enable bool, attempt int) {
	a, unlock, err := s.lockAccount(rctx, id)
	if err != nil {
		s.accountStorageError(ctx, err)
		return
	}
	a.Disabled = !enable
	a.IfVersion = a.Version
	stale := !s.putAccount(ctx, rctx, a, 200, attempt < maxEditAttempts)
	unlock()
	if stale {
		s.enableAccountAttempt(ctx, rctx, id, enable, attempt+1)
	}
}

// probe serves POST /api/admin/accounts/{id or name}/probe (probeAccount).
func (s *Server) probe(ctx *fasthttp.RequestCtx, rctx context.Context, id string) {
	a, err := s.store.GetAccount(rctx, id)
	if err != nil {
		s.accountStorageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, probeAccount(rctx, a))
}

// statusOf is the live status name of an account, "absent" when it has no view.
func statusOf(v *actors.View) string {
	if v == nil {
		return "absent"
	}
	return v.Status.String()
}

func viewPtr(m map[string]*actors.View, id string) *actors.View { return m[id] }

func scorePtr(m map[string]actors.Scored, id string) *actors.Scored {
	if v, ok := m[id]; ok {
		return &v
	}
	return nil
}

// lockAccount takes the edit lock of the account with this ID or name
// and reads it afresh under it (recordLocks); unlock is nil on error.
func (s *Server) lockAccount(rctx context.Context, idOrName string) (a storage.Account, unlock func(), err error) {
	a, err = s.store.GetAccount(rctx, idOrName)
	if err != nil {
		return a, nil, err
	}
	unlock = s.edits.lock("account:" + a.ID)
	if a, err = s.store.GetAccount(rctx, a.ID); err != nil {
		unlock()
		return a, nil, err
	}
	return a, unlock, nil
}

// bulkEnable enables or disables the account with this ID under its edit
// lock, storing it only when that changes it; storage.ErrNotFound when it
// went meanwhile.
func (s *Server) bulkEnable(rctx context.Context, id string, enable bool) error {
	a, unlock, err := s.lockAccount(rctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if a.Disabled == !enable {
		return nil
	}
	a.Disabled = !enable
	stored, err := s.store.PutAccount(rctx, a)
	if err == nil {
		s.sys.PutAccount(stored)
	}
	return err
}

// putAccount stores a changed account, applies it to the pool and answers it.
//
// A conditional write (a.IfVersion) that finds the account changed answers
// 409 edit_conflict, unless retry: then it answers nothing and returns
// false, for the caller to read the account again and retry.
func (s *Server) putAccount(ctx *fasthttp.RequestCtx, rctx context.Context, a storage.Account, status int, retry bool) bool {
	stored, err := s.store.PutAccount(rctx, a)
	if errors.Is(err, storage.ErrStale) {
		if retry {
			return false
		}
		cur, gerr := s.store.GetAccount(rctx, a.Name)
		if gerr != nil {
			s.accountStorageError(ctx, gerr)
			return true
		}
		writeError(ctx, errEditConflict("account", a.Name, a.IfVersion, cur.Version))
		return true
	}
	s.accountsChanged()
	if err != nil {
		s.accountStorageError(ctx, err)
		return true
	}
	s.sys.PutAccount(stored)
	s.log.Info("admin: account changed", "account", stored.Name, "disabled", stored.Disabled)
	views, scores := s.liveIndex(rctx)
	writeJSON(ctx, status, toAccountJSON(stored, viewPtr(views, stored.ID), scorePtr(scores, stored.ID), s.now()))
	return true
}

func (s *Server) accountStorageError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		writeError(ctx, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No such account."})
	case errors.Is(err, storage.ErrConflict):
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Message: "The account's name or id is taken."})
	case errors.Is(err, storage.ErrInvalid):
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid", Message: "The account was refused: " + clip(storageReason(err))})
	default:
		s.storageError(ctx, err)
	}
}

// storageReason is the part of a storage error after "storage: invalid: ",
// which names the rule broken (never a secret).
func storageReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, storage.ErrInvalid.Error()+": "); i >= 0 {
		return msg[i+len(storage.ErrInvalid.Error())+2:]
	}
	return "invalid value"
}

func (s *Server) listAccounts(ctx *fasthttp.RequestCtx, rctx context.Context) {
	f, aerr := parseAccountFilter(ctx.QueryArgs())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	accs, err := s.accountList(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	views, scores := s.liveIndex(rctx)
	rows := make([]accountRow, 0, len(accs))
	for i := range accs {
		r := accountRow{a: accs[i], v: viewPtr(views, accs[i].ID), sc: scorePtr(scores, accs[i].ID)}
		if f.keep(&r) {
			rows = append(rows, r)
		}
	}
	now := s.now()
	brief := func(r *accountRow) {
		if s.stats == nil {
			return
		}
		if b, ok := s.stats.HourBrief(r.a.ID, now); ok {
			r.st = &b
		}
	}
	if f.sort == "success_rate" || f.sort == "latency_p95" {
		for i := range rows {
			brief(&rows[i])
		}
	}
	if f.sort != "" && f.sort != "name" || f.desc {
		slices.SortStableFunc(rows, func(x, y accountRow) int { return f.compare(&x, &y) })
	}
	total := len(rows)
	lo := min(f.offset, total)
	hi := min(lo+f.limit, total)
	page := make([]accountJSON, 0, hi-lo)
	flags := s.hygieneFlags(rctx)
	for _, r := range rows[lo:hi] {
		j := toAccountJSON(r.a, r.v, r.sc, now)
		if f, ok := flags[r.a.ID]; ok {
			j.Hygiene = &f
		}
		if r.st == nil {
			brief(&r)
		}
		j.Stats1h = r.st
		page = append(page, j)
	}
	writeJSON(ctx, 200, map[string]any{"total": total, "pool": len(accs), "offset": f.offset, "limit": f.limit, "accounts": page})
}

func (s *Server) exportAccounts(ctx *fasthttp.RequestCtx, rctx context.Context) {
	accs, err := s.store.ListAccounts(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	out := make([]accountInput, 0, len(accs))
	for _, a := range accs {
		out = append(out, exportOf(a))
	}
	ctx.Response.Header.Set("Content-Disposition", `attachment; filename="troupe-accounts.json"`)
	writeJSON(ctx, 200, out)
}

// bulkAccounts serves POST /api/admin/accounts/bulk {"ids": [...], "action": "enable"|"disable"|"delete"}.
func (s *Server) bulkAccounts(ctx *fasthttp.RequestCtx, rctx context.Context) {
	var body struct {
		IDs    []string `json:"ids"`
		Action string   `json:"action"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || len(body.IDs) == 0 || len(body.IDs) > 100_000 {
		writeError(ctx, errBadParam("ids", `The body must be JSON {"ids": ["..."], "action": "enable"|"disable"|"delete"} with 1 to 100000 ids.`))
		return
	}
	switch body.Action {
	case "enable", "disable", "delete":
	default:
		writeError(ctx, errBadParam("action", "action is enable, disable or delete."))
		return
	}
	done, missing := 0, []string{}
	defer s.accountsChanged()
	for _, id := range body.IDs {
		a, err := s.store.GetAccount(rctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			missing = append(missing, clip(id))
			continue
		}
		if err == nil {
			if body.Action == "delete" {
				if err = s.store.DeleteAccount(rctx, a.ID); err == nil {
					s.sys.RemoveAccount(a.ID)
					s.stats.Forget(a.ID)
				}
			} else if err = s.bulkEnable(rctx, a.ID, body.Action == "enable"); errors.Is(err, storage.ErrNotFound) {
				missing = append(missing, clip(id)) // deleted meanwhile
				continue
			}
		}
		if err != nil {
			s.log.Error("admin: bulk accounts", "action", body.Action, "done", done, "err", err)
			writeJSON(ctx, 500, map[string]any{"error": map[string]any{"message": "Storage error after " + strconv.Itoa(done) + " accounts; see the gateway log.",
				"type": "server_error", "code": nil, "param": nil}, "done": done})
			return
		}
		done++
	}
	s.log.Info("admin: bulk accounts", "action", body.Action, "done", done, "missing", len(missing))
	writeJSON(ctx, 200, map[string]any{"action": body.Action, "done": done, "missing": missing})
}

// windowsJSON is ws as the admin API shows them (never null).
func windowsJSON(ws []actors.UsageWindow) []windowJSON {
	out := make([]windowJSON, 0, len(ws))
	for _, w := range ws {
		wj := windowJSON{Name: w.Name, UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes}
		if !w.ResetsAt.IsZero() {
			t := w.ResetsAt.UTC()
			wj.ResetsAt = &t
		}
		out = append(out, wj)
	}
	return out
}
