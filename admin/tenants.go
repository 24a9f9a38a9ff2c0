package admin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
)

// The tenants routes (docs/admin-api.md, "Users and billing"): users and
// their ledgers, prices, and spend by user and model. Amounts are decimal
// strings of the currency on the wire ("12.500000"), read exactly
// (billing.ParseAmount) and never as JSON numbers, so no float touches them.

// userJSON is a user as the admin API shows it; never its password hash.
type userJSON struct {
	ID             string     `json:"id"`
	Name           string     `json:"name"`
	Email          string     `json:"email"`
	Group          string     `json:"group"`
	Disabled       bool       `json:"disabled"`
	Models         []string   `json:"models"`
	RPM            int64      `json:"rpm"`
	MaxConcurrency int64      `json:"max_concurrency"`
	Password       bool       `json:"has_password"`
	Balance        string     `json:"balance"`
	BalanceMicro   int64      `json:"balance_micro"`
	CreatedAt      time.Time  `json:"created_at"`
	LastLoginAt    *time.Time `json:"last_login_at"`
	// Version is the user's last write (storage.User.UpdatedAt, in Unix
	// ms): send it back in a PATCH to have the edit refused with 409
	// edit_conflict if the user changed since.
	Version int64 `json:"version"`
}

func toUserJSON(u storage.User, balance int64) userJSON {
	models := u.Models
	if models == nil {
		models = []string{}
	}
	return userJSON{ID: u.ID, Name: u.Name, Email: u.Email, Group: u.Group, Disabled: u.Disabled, Models: models, RPM: u.RPM,
		MaxConcurrency: u.MaxConcurrency, Password: u.PasswordHash != "", Balance: billing.FormatAmount(balance), BalanceMicro: balance,
		CreatedAt: u.CreatedAt, LastLoginAt: u.LastLoginAt, Version: u.UpdatedAt.UnixMilli()}
}

type ledgerJSON struct {
	ID        int64     `json:"id"`
	Kind      string    `json:"kind"`
	Amount    string    `json:"amount"`
	Micro     int64     `json:"amount_micro"`
	Actor     string    `json:"actor"`
	Note      string    `json:"note"`
	RequestID string    `json:"request_id"`
	CreatedAt time.Time `json:"created_at"`
}

// actorOf names who made a change through the admin API, for the ledger.
func actorOf(p *principal) string {
	if p.session != nil {
		return "admin:" + p.user.Username
	}
	return "key:" + p.key.Name
}

// billingChanged reloads this instance's prices and users and tells the
// others (billing.Channel).
func (s *Server) billingChanged(ctx context.Context, msg string) {
	if s.billing != nil {
		if err := s.billing.Reload(ctx); err != nil {
			s.log.Warn("admin: billing not reloaded here", "err", err)
		}
	}
	if s.cache != nil {
		if err := s.cache.Publish(ctx, billing.Channel, msg); err != nil {
			s.log.Warn("billing broadcast failed; other instances see the change within 30 s", "err", err)
		}
	}
}

// tenantStorageError answers a storage error of the tenants routes.
func (s *Server) tenantStorageError(ctx *fasthttp.RequestCtx, what string, err error) {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		writeError(ctx, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No such " + what + "."})
	case errors.Is(err, storage.ErrConflict):
		// The storage error's text is the backend's (a constraint's name):
		// routes that know what conflicts say so before calling this.
		writeError(ctx, errConflict("", "The "+what+" conflicts with one stored."))
	case errors.Is(err, storage.ErrInvalid):
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid", Message: "The " + what + " was refused: " + clip(storageReason(err))})
	default:
		s.storageError(ctx, err)
	}
}

// errConflict is a 409 conflict saying msg, naming param when one field
// is the cause.
func errConflict(param, msg string) *APIError {
	return &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Param: param, Message: msg}
}

// userConflict says what a user u that storage refused with ErrConflict
// conflicts with: another user of its name, else another of its email
// (looked up after the fact, so a user that went meanwhile leaves the
// general message).
func (s *Server) userConflict(rctx context.Context, u storage.User) *APIError {
	if o, err := s.store.GetUser(rctx, u.Name); err == nil && o.ID != u.ID && o.Name == u.Name {
		return errConflict("name", "A user named "+clip(u.Name)+" exists.")
	}
	if u.Email != "" {
		if o, err := s.store.GetUser(rctx, u.Email); err == nil && o.ID != u.ID && strings.EqualFold(o.Email, u.Email) {
			return errConflict("email", "A user with the email "+clip(u.Email)+" exists.")
		}
	}
	return errConflict("", "Another user has this name or email.")
}

// adminUsers serves /api/admin/users: GET (a page of the list with
// balances, offset and limit as GET /api/admin/accounts), POST
// (create); /users/{id|name}: GET (with its latest ledger rows), PATCH,
// DELETE (only without ledger rows); /users/{id|name}/ledger: GET (a page
// of its ledger, older rows by before), POST (a top-up, refund or
// adjustment).
func (s *Server) adminUsers(ctx *fasthttp.RequestCtx, p *principal, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case len(parts) == 0 && method == "GET":
		// Paged as GET /api/admin/accounts: a bad offset or limit is a 400
		// naming it, not the whole list.
		offset, aerr := intArg(ctx.QueryArgs(), "offset", 0, 0, 1<<30)
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		limit, aerr := intArg(ctx.QueryArgs(), "limit", 50, 1, 1000)
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		users, err := s.store.ListUsers(rctx)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		bal, err := s.store.Balances(rctx)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		q := strings.ToLower(string(ctx.QueryArgs().Peek("q")))
		kept := users[:0:0]
		for _, u := range users {
			if q == "" || strings.Contains(strings.ToLower(u.Name), q) || strings.Contains(strings.ToLower(u.Email), q) {
				kept = append(kept, u)
			}
		}
		total := len(kept)
		lo := min(offset, total)
		hi := min(lo+limit, total)
		out := make([]userJSON, 0, hi-lo)
		for _, u := range kept[lo:hi] {
			out = append(out, toUserJSON(u, bal[u.ID]))
		}
		writeJSON(ctx, 200, map[string]any{"total": total, "pool": len(users), "offset": offset, "limit": limit, "users": out})
	case len(parts) == 0 && method == "POST":
		s.createUser(ctx, rctx, p)
	case len(parts) == 1 || (len(parts) == 2 && parts[1] == "ledger"):
		u, err := s.store.GetUser(rctx, parts[0])
		if err != nil {
			s.tenantStorageError(ctx, "user", err)
			return
		}
		switch {
		case len(parts) == 2 && method == "POST":
			s.postLedger(ctx, rctx, p, u)
		case len(parts) == 2 && method == "GET":
			s.userLedger(ctx, rctx, u)
		case len(parts) == 2:
			writeError(ctx, errMethod(method, string(ctx.Path())))
		case method == "GET":
			s.writeUser(ctx, rctx, u)
		case method == "PATCH":
			for attempt := 1; ; attempt++ {
				unlock := s.edits.lock("user:" + u.ID)
				if u, err = s.store.GetUser(rctx, u.ID); err != nil { // afresh, under the lock
					unlock()
					s.tenantStorageError(ctx, "user", err)
					return
				}
				stale := !s.updateUser(ctx, rctx, u, attempt < maxEditAttempts)
				unlock()
				if !stale {
					break
				}
			}
		case method == "DELETE":
			if err := s.store.DeleteUser(rctx, u.ID); err != nil {
				if errors.Is(err, storage.ErrConflict) {
					writeError(ctx, errConflict("", "User "+clip(u.Name)+" has ledger rows and cannot be deleted; disable it instead."))
					return
				}
				s.tenantStorageError(ctx, "user", err)
				return
			}
			s.billingChanged(rctx, "user deleted "+u.ID)
			s.log.Info("admin: user deleted", "user", u.Name, "by", actorOf(p))
			ctx.SetStatusCode(204)
		default:
			writeError(ctx, errMethod(method, string(ctx.Path())))
		}
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// userBody is the body of POST and PATCH /api/admin/users: absent fields
// are unchanged (PATCH) or zero (POST).
type userBody struct {
	Name           *string     `json:"name"`
	Email          *string     `json:"email"`
	Password       *string     `json:"password"`
	Group          *string     `json:"group"`
	Disabled       *bool       `json:"disabled"`
	Models         *[]string   `json:"models"`
	RPM            *int64      `json:"rpm"`
	MaxConcurrency *int64      `json:"max_concurrency"`
	Balance        amountField `json:"balance"` // POST: starting balance, a decimal string
	Version        *int64      `json:"version"` // PATCH: the version read; a user changed since is a 409
}

// apply sets the fields b has on u; an error is the 400 to answer.
func (b *userBody) apply(u *storage.User) *APIError {
	if b.Name != nil {
		u.Name = *b.Name
	}
	if b.Email != nil {
		u.Email = *b.Email
	}
	if b.Group != nil {
		u.Group = *b.Group
	}
	if b.Disabled != nil {
		u.Disabled = *b.Disabled
	}
	if b.Models != nil {
		if aerr := errEmptyEntry("models", *b.Models); aerr != nil {
			return aerr
		}
		u.Models = *b.Models
	}
	if b.RPM != nil {
		u.RPM = *b.RPM
	}
	if b.MaxConcurrency != nil {
		u.MaxConcurrency = *b.MaxConcurrency
	}
	if b.Password != nil {
		if *b.Password == "" {
			u.PasswordHash = ""
			return nil
		}
		if err := CheckPassword(*b.Password); err != nil {
			return errBadParam("password", strings.Replace(err.Error(), "an admin password", "a password", 1)+".")
		}
		h, err := HashPassword(*b.Password)
		if err != nil {
			return &APIError{Status: 500, Type: "server_error", Message: "The password could not be hashed."}
		}
		u.PasswordHash = h
	}
	return nil
}

func (s *Server) createUser(ctx *fasthttp.RequestCtx, rctx context.Context, p *principal) {
	var b userBody
	if err := decodeStrict(ctx.PostBody(), &b); err != nil {
		writeError(ctx, errBadParam("body", `The body must be JSON with at least {"name": "…"}: `+jsonDecodeError(err)))
		return
	}
	if b.Name == nil {
		writeError(ctx, errBadParam("name", `The body must be JSON with at least {"name": "…"}.`))
		return
	}
	var u storage.User
	if aerr := b.apply(&u); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var start int64
	if b.Balance.Set {
		v, aerr := parseAmountField("balance", b.Balance, false)
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		start = v
	}
	got, err := s.store.CreateUser(rctx, u, storage.NewUser{Balance: start, Actor: actorOf(p), Note: "starting balance"})
	if errors.Is(err, storage.ErrConflict) {
		writeError(ctx, s.userConflict(rctx, u))
		return
	}
	if err != nil {
		s.tenantStorageError(ctx, "user", err)
		return
	}
	s.log.Info("admin: user created", "user", got.Name, "by", actorOf(p))
	writeJSON(ctx, 201, toUserJSON(got, start))
}

// updateUser applies a PATCH's body to u, as read under the user's edit
// lock, in a write conditional on u's UpdatedAt. With "version" in the
// body, a user changed since the editor read it is a 409 edit_conflict.
// Without it, a user changed by another instance between the read and the
// write answers nothing and returns false when retry, for the caller to
// read it again (editAccount); else that is a 409 too.
func (s *Server) updateUser(ctx *fasthttp.RequestCtx, rctx context.Context, u storage.User, retry bool) bool {
	var b userBody
	if err := decodeStrict(ctx.PostBody(), &b); err != nil {
		writeError(ctx, errBadParam("body", "The body must be JSON with the fields to change: "+jsonDecodeError(err)))
		return true
	}
	if b.Balance.Set {
		writeError(ctx, errBadParam("", "The body must be JSON with the fields to change; a balance changes through POST …/ledger."))
		return true
	}
	read := u.UpdatedAt.UnixMilli()
	if b.Version != nil && *b.Version != read {
		writeError(ctx, errEditConflict("user", u.Name, *b.Version, read))
		return true
	}
	if aerr := b.apply(&u); aerr != nil {
		writeError(ctx, aerr)
		return true
	}
	u.IfUpdatedAt = u.UpdatedAt
	got, err := s.store.UpdateUser(rctx, u)
	if errors.Is(err, storage.ErrStale) {
		if retry && b.Version == nil {
			return false
		}
		now := read
		if cur, gerr := s.store.GetUser(rctx, u.ID); gerr == nil {
			now = cur.UpdatedAt.UnixMilli()
		}
		writeError(ctx, errEditConflict("user", u.Name, read, now))
		return true
	}
	if errors.Is(err, storage.ErrConflict) {
		writeError(ctx, s.userConflict(rctx, u))
		return true
	}
	if err != nil {
		s.tenantStorageError(ctx, "user", err)
		return true
	}
	s.billingChanged(rctx, "user "+got.ID)
	s.writeUser(ctx, rctx, got)
	return true
}

// writeUser answers u with its balance, its latest 50 ledger rows and
// the next_before of their page (GET …/ledger reads the older ones).
func (s *Server) writeUser(ctx *fasthttp.RequestCtx, rctx context.Context, u storage.User) {
	bal, err := s.store.Balance(rctx, u.ID)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	rows, next, err := s.readLedgerPage(rctx, storage.LedgerQuery{UserID: u.ID, Limit: userLedgerRows})
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, map[string]any{"user": toUserJSON(u, bal), "ledger": toLedgerJSON(rows), "next_before": next})
}

// userLedgerRows is how many ledger rows GET /api/admin/users/{id} shows,
// and the default page of GET …/ledger.
const userLedgerRows = 50

// userLedger serves GET /api/admin/users/{id}/ledger?limit=&before=: a
// page of u's ledger rows, newest first (limit, default 50, at most 1000;
// before: the previous page's next_before), paged as the users' console
// pages a user's own (ledgerPageQuery).
func (s *Server) userLedger(ctx *fasthttp.RequestCtx, rctx context.Context, u storage.User) {
	q, aerr := ledgerPageQuery(ctx.QueryArgs(), u.ID, userLedgerRows)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rows, next, err := s.readLedgerPage(rctx, q)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, map[string]any{"ledger": toLedgerJSON(rows), "next_before": next})
}

// toLedgerJSON is rows as the admin API shows them (who made each, too).
func toLedgerJSON(rows []storage.LedgerEntry) []ledgerJSON {
	out := make([]ledgerJSON, 0, len(rows))
	for _, e := range rows {
		out = append(out, ledgerJSON{ID: e.ID, Kind: string(e.Kind), Amount: billing.FormatAmount(e.Amount), Micro: e.Amount,
			Actor: e.Actor, Note: e.Note, RequestID: e.RequestID, CreatedAt: e.CreatedAt})
	}
	return out
}

// postLedger serves POST /api/admin/users/{id}/ledger: {"kind": "topup" |
// "refund" | "adjustment" (default topup), "amount": "12.50", "note": "…",
// "request_id": "…" (a refund's request)}; a note is required.
func (s *Server) postLedger(ctx *fasthttp.RequestCtx, rctx context.Context, p *principal, u storage.User) {
	var b struct {
		Kind      string      `json:"kind"`
		Amount    amountField `json:"amount"`
		Note      string      `json:"note"`
		RequestID string      `json:"request_id"`
	}
	if err := decodeStrict(ctx.PostBody(), &b); err != nil {
		writeError(ctx, errBadParam("", `The body must be JSON {"amount": "12.50", "note": "…"}: `+jsonDecodeError(err)))
		return
	}
	if b.Kind == "" {
		b.Kind = string(storage.LedgerTopup)
	}
	if b.Kind == string(storage.LedgerCharge) {
		writeError(ctx, errBadParam("kind", "Charges are made by the gateway; use topup, refund or adjustment."))
		return
	}
	amount, aerr := parseAmountField("amount", b.Amount, true)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if strings.TrimSpace(b.Note) == "" {
		writeError(ctx, errBadParam("note", "A note saying why is required; it is kept in the ledger."))
		return
	}
	e, err := s.store.PostLedger(rctx, storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerKind(b.Kind), Amount: amount, Actor: actorOf(p), Note: b.Note, RequestID: b.RequestID})
	if errors.Is(err, storage.ErrConflict) {
		// A request is charged, and refunded, at most once.
		writeError(ctx, errConflict("request_id", "Request "+clip(b.RequestID)+" already has a "+b.Kind+" in the ledger; a request has at most one."))
		return
	}
	if err != nil {
		s.tenantStorageError(ctx, "ledger entry", err)
		return
	}
	s.log.Info("admin: ledger entry", "user", u.Name, "kind", e.Kind, "amount", billing.FormatAmount(e.Amount), "by", e.Actor)
	s.writeUser(ctx, rctx, u)
}

type priceJSON struct {
	Model       string    `json:"model"`
	Currency    string    `json:"currency"`
	Input       string    `json:"input"`
	CachedInput string    `json:"cached_input"`
	CacheWrite  string    `json:"cache_write"`
	Output      string    `json:"output"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func toPriceJSON(p storage.Price) priceJSON {
	return priceJSON{Model: p.Model, Currency: p.Currency, Input: billing.FormatAmount(p.Input), CachedInput: billing.FormatAmount(p.CachedInput),
		CacheWrite: billing.FormatAmount(p.CacheWrite), Output: billing.FormatAmount(p.Output), UpdatedAt: p.UpdatedAt}
}

// adminPrices serves /api/admin/prices: GET lists; /prices/{model}: PUT
// {"input": "1.25", "output": "10", "cached_input"?, "cache_write"?} (per
// million tokens; defaults as troupe prices set), DELETE.
func (s *Server) adminPrices(ctx *fasthttp.RequestCtx, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case len(parts) == 0 && method == "GET":
		prices, err := s.store.ListPrices(rctx)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		out := make([]priceJSON, 0, len(prices))
		for _, p := range prices {
			out = append(out, toPriceJSON(p))
		}
		writeJSON(ctx, 200, map[string]any{"prices": out})
	case len(parts) == 1 && method == "PUT":
		var b struct{ Input, Output, CachedInput, CacheWrite amountField }
		var raw map[string]amountField
		if err := json.Unmarshal(ctx.PostBody(), &raw); err != nil {
			writeError(ctx, errBadParam("", `The body must be JSON {"input": "1.25", "output": "10"} (strings, per million tokens).`))
			return
		}
		for k := range raw {
			if k != "input" && k != "output" && k != "cached_input" && k != "cache_write" {
				writeError(ctx, errBadParam(k, `unknown field "`+clip(k)+`": a price has input, output, cached_input and cache_write.`))
				return
			}
		}
		b.Input, b.Output, b.CachedInput, b.CacheWrite = raw["input"], raw["output"], raw["cached_input"], raw["cache_write"]
		p := storage.Price{Model: parts[0]}
		for _, f := range []struct {
			name string
			v    amountField
			dst  *int64
		}{{"input", b.Input, &p.Input}, {"output", b.Output, &p.Output}, {"cached_input", b.CachedInput, &p.CachedInput}, {"cache_write", b.CacheWrite, &p.CacheWrite}} {
			if !f.v.Set && (f.name == "input" || f.name == "output") {
				writeError(ctx, errBadParam(f.name, f.name+" is required (a decimal string per million tokens)."))
				return
			}
			if !f.v.Set {
				continue
			}
			v, aerr := parseAmountField(f.name, f.v, false)
			if aerr != nil {
				writeError(ctx, aerr)
				return
			}
			*f.dst = v
		}
		if !b.CachedInput.Set {
			p.CachedInput = p.Input
		}
		if !b.CacheWrite.Set {
			p.CacheWrite = billing.DefaultCacheWrite(p.Input)
		}
		p.Currency = storage.DefaultCurrency
		if c, err := s.store.GetSetting(rctx, storage.SettingCurrency); err == nil {
			p.Currency = c
		}
		got, err := s.store.PutPrice(rctx, p)
		if err != nil {
			s.tenantStorageError(ctx, "price", err)
			return
		}
		s.billingChanged(rctx, "price "+p.Model)
		writeJSON(ctx, 200, toPriceJSON(got))
	case len(parts) == 1 && method == "DELETE":
		if err := s.store.DeletePrice(rctx, parts[0]); err != nil {
			s.tenantStorageError(ctx, "price", err)
			return
		}
		s.billingChanged(rctx, "price deleted "+parts[0])
		ctx.SetStatusCode(204)
	case len(parts) <= 1:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// priceGroupJSON is a user group's price multiplier in the admin API: a
// decimal string ("0.8" is ×0.8), six digits after the point at most.
type priceGroupJSON struct {
	Group      string `json:"group"`
	Multiplier string `json:"multiplier"`
}

// adminPriceGroups serves /api/admin/price-groups: GET lists the user
// groups' price multipliers; /price-groups/{group}: PUT {"multiplier":
// "0.8"} (a decimal string above 0; the group's users pay every price ×
// it, ×1 when their group has none), DELETE (back to ×1).
func (s *Server) adminPriceGroups(ctx *fasthttp.RequestCtx, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case len(parts) == 0 && method == "GET":
		groups, err := s.store.ListPriceGroups(rctx)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		out := make([]priceGroupJSON, 0, len(groups))
		for _, g := range groups {
			// Parts per million are micro-units of ×1: the amount format fits.
			out = append(out, priceGroupJSON{Group: g.Group, Multiplier: billing.FormatAmount(g.Multiplier)})
		}
		writeJSON(ctx, 200, map[string]any{"price_groups": out})
	case len(parts) == 1 && method == "PUT":
		var b struct {
			Multiplier string `json:"multiplier"`
		}
		if err := decodeStrict(ctx.PostBody(), &b); err != nil {
			writeError(ctx, errBadParam("", `The body must be JSON {"multiplier": "0.8"} (a decimal string): `+jsonDecodeError(err)))
			return
		}
		m, err := billing.ParseAmount(b.Multiplier)
		if err != nil || m <= 0 || m > storage.MaxMultiplier {
			writeError(ctx, errBadParam("multiplier", "multiplier is a decimal above 0 and at most 1000 with at most 6 digits after the point (\"0.8\" is ×0.8)."))
			return
		}
		if err := s.store.PutPriceGroup(rctx, storage.PriceGroup{Group: parts[0], Multiplier: m}); err != nil {
			s.tenantStorageError(ctx, "price group", err)
			return
		}
		s.billingChanged(rctx, "price group "+parts[0])
		writeJSON(ctx, 200, priceGroupJSON{Group: parts[0], Multiplier: billing.FormatAmount(m)})
	case len(parts) == 1 && method == "DELETE":
		if err := s.store.DeletePriceGroup(rctx, parts[0]); err != nil {
			s.tenantStorageError(ctx, "price group", err)
			return
		}
		s.billingChanged(rctx, "price group deleted "+parts[0])
		ctx.SetStatusCode(204)
	case len(parts) <= 1:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// adminSpend serves GET /api/admin/spend?from=&to=&user=&model=: the daily
// rollups per user and model (from and to RFC 3339, user an id or name),
// with each row's cost as a decimal string.
func (s *Server) adminSpend(ctx *fasthttp.RequestCtx, method string, parts []string) {
	if len(parts) != 0 || method != "GET" {
		writeError(ctx, errMethod(method, string(ctx.Path())))
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := ctx.QueryArgs()
	var q storage.UserDailyQuery
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		if v := string(args.Peek(f.name)); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeError(ctx, errBadParam(f.name, f.name+" is an RFC 3339 time."))
				return
			}
			*f.dst = t
		}
	}
	if v := string(args.Peek("user")); v != "" {
		u, err := s.store.GetUser(rctx, v)
		if err != nil {
			s.tenantStorageError(ctx, "user", err)
			return
		}
		q.UserID = u.ID
	}
	q.Model = string(args.Peek("model"))
	rows, err := s.store.UserDaily(rctx, q)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	out := make([]spendRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, toSpendRow(r, true))
	}
	writeJSON(ctx, 200, map[string]any{"rows": out})
}

// spendRow is one daily rollup of a user and model in the admin API and
// the console: day (UTC, YYYY-MM-DD), tokens, and the cost as a decimal
// string and in micro-units. user_id only in the admin API.
type spendRow struct {
	Day          string `json:"day"`
	UserID       string `json:"user_id,omitempty"`
	Model        string `json:"model"`
	Requests     int64  `json:"requests"`
	InputTokens  int64  `json:"input_tokens"`
	CachedTokens int64  `json:"cached_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	Cost         string `json:"cost"`
	CostMicro    int64  `json:"cost_micro"`
}

// toSpendRow renders r, naming its user when withUser.
func toSpendRow(r storage.UserDaily, withUser bool) spendRow {
	row := spendRow{Day: r.Day.Format("2006-01-02"), Model: r.Model, Requests: r.Requests, InputTokens: r.InputTokens,
		CachedTokens: r.CachedTokens, OutputTokens: r.OutputTokens, Cost: billing.FormatAmount(r.Cost), CostMicro: r.Cost}
	if withUser {
		row.UserID = r.UserID
	}
	return row
}

type invitationJSON struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	Note      string     `json:"note"`
	MaxUses   int64      `json:"max_uses"`
	Uses      int64      `json:"uses"`
	Disabled  bool       `json:"disabled"`
	ExpiresAt *time.Time `json:"expires_at"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
}

func toInvitationJSON(i storage.Invitation) invitationJSON {
	return invitationJSON{ID: i.ID, Prefix: i.Prefix, Note: i.Note, MaxUses: i.MaxUses, Uses: i.Uses, Disabled: i.Disabled,
		ExpiresAt: i.ExpiresAt, CreatedBy: i.CreatedBy, CreatedAt: i.CreatedAt}
}

// adminInvitations serves /api/admin/invitations: GET lists (never the
// codes), POST {"max_uses"? (default 1), "note"?, "expires_in_hours"?}
// answers 201 with the code, shown once (only its SHA-256 is stored);
// DELETE /invitations/{id} disables one (kept, with its uses).
func (s *Server) adminInvitations(ctx *fasthttp.RequestCtx, p *principal, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case len(parts) == 0 && method == "GET":
		l, err := s.store.ListInvitations(rctx)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		out := make([]invitationJSON, 0, len(l))
		for _, i := range l {
			out = append(out, toInvitationJSON(i))
		}
		writeJSON(ctx, 200, map[string]any{"invitations": out})
	case len(parts) == 0 && method == "POST":
		var b struct {
			MaxUses        int64  `json:"max_uses"`
			Note           string `json:"note"`
			ExpiresInHours int64  `json:"expires_in_hours"`
		}
		if len(ctx.PostBody()) > 0 {
			if err := decodeStrict(ctx.PostBody(), &b); err != nil {
				writeError(ctx, errBadParam("", `The body must be JSON {"max_uses": 1, "note": "…", "expires_in_hours": 72} (all optional): `+jsonDecodeError(err)))
				return
			}
		}
		if b.MaxUses == 0 {
			b.MaxUses = 1
		}
		if b.MaxUses < 0 || b.ExpiresInHours < 0 || b.ExpiresInHours > 24*3650 {
			writeError(ctx, errBadParam("max_uses", "max_uses is at least 1 and expires_in_hours from 0 (never) to 87600."))
			return
		}
		code, err := NewPassword()
		if err != nil {
			writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "No code could be made."})
			return
		}
		code = "inv-" + code
		inv := storage.Invitation{Hash: storage.HashKey(code), Prefix: code[:8], Note: b.Note, MaxUses: b.MaxUses, CreatedBy: actorOf(p)}
		if b.ExpiresInHours > 0 {
			t := s.now().Add(time.Duration(b.ExpiresInHours) * time.Hour).UTC()
			inv.ExpiresAt = &t
		}
		got, err := s.store.CreateInvitation(rctx, inv)
		if err != nil {
			s.tenantStorageError(ctx, "invitation", err)
			return
		}
		s.log.Info("admin: invitation created", "prefix", got.Prefix, "max_uses", got.MaxUses, "by", got.CreatedBy)
		writeJSON(ctx, 201, map[string]any{"invitation": toInvitationJSON(got), "code": code})
	case len(parts) == 1 && method == "DELETE":
		if err := s.store.DisableInvitation(rctx, parts[0]); err != nil {
			s.tenantStorageError(ctx, "invitation", err)
			return
		}
		ctx.SetStatusCode(204)
	case len(parts) <= 1:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// adminRegistration serves GET and PUT /api/admin/registration
// {"mode": "closed" | "invite" | "open"} (setting users.registration,
// default closed).
func (s *Server) adminRegistration(ctx *fasthttp.RequestCtx, p *principal, method string, parts []string) {
	if len(parts) != 0 {
		writeError(ctx, errNotFound(string(ctx.Path())))
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch method {
	case "GET":
	case "PUT":
		var b struct {
			Mode string `json:"mode"`
		}
		if err := decodeStrict(ctx.PostBody(), &b); err != nil {
			writeError(ctx, errBadParam("body", `The body must be JSON {"mode": "closed" | "invite" | "open"}: `+jsonDecodeError(err)))
			return
		}
		if !storage.ValidRegistration(b.Mode) {
			writeError(ctx, errBadParam("mode", `The body must be JSON {"mode": "closed" | "invite" | "open"}.`))
			return
		}
		if err := s.store.PutSetting(rctx, storage.SettingRegistration, b.Mode); err != nil {
			s.storageError(ctx, err)
			return
		}
		s.log.Info("admin: registration mode changed", "mode", b.Mode, "by", actorOf(p))
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
		return
	}
	mode, err := s.store.GetSetting(rctx, storage.SettingRegistration)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		mode = storage.RegistrationClosed
	case err != nil:
		s.storageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, map[string]string{"mode": mode})
}
