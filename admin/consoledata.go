package admin

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// maxConsoleKeys bounds how many keys a user may hold.
const maxConsoleKeys = 50

// consoleKeyJSON is one of a user's keys as the console shows it: never
// the secret or its hash.
type consoleKeyJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`   // as the user named it
	Prefix    string     `json:"prefix"` // the secret's first characters
	Models    []string   `json:"models"` // the key's allowlist; empty: every model the user may use
	Disabled  bool       `json:"disabled"`
	ExpiresAt *time.Time `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
	Limits    limitsJSON `json:"limits"` // the key's own; 0: none
	State     string     `json:"state"`  // active, disabled or expired
}

// consoleKeyPrefix is how the names of u's keys begin in storage: key
// names are unique across all keys, so a user's "laptop" is stored as
// "alice/laptop" and two users may each have a "laptop".
func consoleKeyPrefix(u storage.User) string { return u.Name + "/" }

func toConsoleKeyJSON(u storage.User, k storage.APIKey, now time.Time) consoleKeyJSON {
	j := toKeyJSON(k, now)
	return consoleKeyJSON{ID: k.ID, Name: strings.TrimPrefix(k.Name, consoleKeyPrefix(u)), Prefix: k.Prefix, Models: j.Models,
		Disabled: k.Disabled, ExpiresAt: k.ExpiresAt, CreatedAt: k.CreatedAt, Limits: j.Limits, State: j.State}
}

// consoleData serves the logged-in user's own data: keys, balance, usage
// and spend. Everything is filtered by the session's user: another user's
// key is 404.
func (s *Server) consoleData(ctx *fasthttp.RequestCtx, p *consolePrincipal, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case parts[0] == "keys":
		s.consoleKeys(ctx, rctx, p, method, parts[1:])
	case parts[0] == "balance" && len(parts) == 1 && method == "GET":
		s.consoleBalance(ctx, rctx, p)
	case parts[0] == "usage" && len(parts) == 1 && method == "GET":
		s.consoleUsage(ctx, rctx, p)
	case parts[0] == "spend" && len(parts) == 1 && method == "GET":
		s.consoleSpend(ctx, rctx, p)
	case (parts[0] == "balance" || parts[0] == "usage" || parts[0] == "spend") && len(parts) == 1:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// ownKeys returns the user's keys.
func (s *Server) ownKeys(rctx context.Context, u storage.User) ([]storage.APIKey, error) {
	all, err := s.store.ListAPIKeys(rctx)
	if err != nil {
		return nil, err
	}
	var own []storage.APIKey
	for _, k := range all {
		if k.UserID == u.ID {
			own = append(own, k)
		}
	}
	return own, nil
}

// consoleKeyInput is the body of POST /api/console/keys: a name and the
// optional limits a user may put on its own key (each only narrows what
// the user may do: the user's own allowlist and limits still apply).
type consoleKeyInput struct {
	Name      string      `json:"name"`
	Models    []string    `json:"models"`     // the key's allowlist; empty: every model the user may use
	Limits    *limitsJSON `json:"limits"`     // rpm, rpd, tokens_per_day; 0 or absent: no limit of the key's own
	ExpiresIn string      `json:"expires_in"` // a Go duration from now ("720h"); "": never
}

// maxConsoleKeyModels bounds a console key's allowlist.
const maxConsoleKeyModels = 100

// check validates the optional fields against u and returns the key's
// limits and expiry; a 400 naming the field otherwise. A model outside
// the user's own allowlist (when it has one) is refused, so the list the
// user sees is the list that applies.
func (in *consoleKeyInput) check(u storage.User, now time.Time) (storage.KeyLimits, *time.Time, *APIError) {
	var lim storage.KeyLimits
	if len(in.Models) > maxConsoleKeyModels {
		return lim, nil, errBadParam("models", "A key's allowlist has at most "+strconv.Itoa(maxConsoleKeyModels)+" models.")
	}
	for _, m := range in.Models {
		if m == "" || len(m) > 200 || !storage.TextOK(m) {
			return lim, nil, errBadParam("models", "Each model is 1 to 200 bytes of text.")
		}
		if len(u.Models) > 0 && !slices.Contains(u.Models, m) {
			return lim, nil, errBadParam("models", clip(m)+" is not among the models you may use.")
		}
	}
	if in.Limits != nil {
		lim = storage.KeyLimits{RPM: in.Limits.RPM, RPD: in.Limits.RPD, TokensPerDay: in.Limits.TokensPerDay}
		if lim.Validate() != nil {
			return lim, nil, errBadParam("limits", "Limits must not be negative.")
		}
	}
	if in.ExpiresIn == "" {
		return lim, nil, nil
	}
	d, err := time.ParseDuration(in.ExpiresIn)
	if err != nil || d <= 0 {
		return lim, nil, errBadParam("expires_in", `expires_in is a positive duration such as "720h".`)
	}
	t := now.Add(d).UTC()
	return lim, &t, nil
}

// consoleKeys serves /api/console/keys: GET (the user's keys), POST
// {"name", "models", "limits", "expires_in"} (a new key; its secret shown
// this once); /keys/{id}: DELETE (revokes it).
func (s *Server) consoleKeys(ctx *fasthttp.RequestCtx, rctx context.Context, p *consolePrincipal, method string, parts []string) {
	now := s.now()
	own, err := s.ownKeys(rctx, p.user)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	switch {
	case len(parts) == 0 && method == "GET":
		out := make([]consoleKeyJSON, 0, len(own))
		for _, k := range own {
			out = append(out, toConsoleKeyJSON(p.user, k, now))
		}
		writeJSON(ctx, 200, map[string]any{"keys": out})
	case len(parts) == 0 && method == "POST":
		var b consoleKeyInput
		if err := json.Unmarshal(ctx.PostBody(), &b); err != nil {
			writeError(ctx, errBadParam("name", `The body must be JSON {"name": "...", "models", "limits", "expires_in"}: `+jsonDecodeError(err)+"."))
			return
		}
		if b.Name == "" || len(b.Name) > 64 || strings.TrimSpace(b.Name) != b.Name || !storage.TextOK(b.Name) {
			writeError(ctx, errBadParam("name", "A key needs a name of 1 to 64 bytes of text."))
			return
		}
		limits, expires, aerr := b.check(p.user, now)
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		if len(own) >= maxConsoleKeys {
			writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "too_many_keys",
				Message: "A user may hold at most " + strconv.Itoa(maxConsoleKeys) + " keys; revoke one first."})
			return
		}
		secret, k, err := gateway.NewKey(consoleKeyPrefix(p.user) + b.Name)
		if err != nil {
			writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not create a key."})
			return
		}
		k.UserID = p.user.ID
		k.Models, k.Limits, k.ExpiresAt = b.Models, limits, expires
		stored, err := s.store.CreateAPIKey(rctx, k)
		if errors.Is(err, storage.ErrConflict) {
			writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Param: "name", Message: "You have a key of that name."})
			return
		} else if err != nil {
			s.keyStorageError(ctx, err)
			return
		}
		s.keysChanged(rctx, "created "+stored.ID)
		s.log.Info("console: api key created", "user", p.user.Name, "key", stored.ID)
		writeJSON(ctx, 201, map[string]any{"key": toConsoleKeyJSON(p.user, stored, now), "secret": secret})
	case len(parts) == 1 && method == "DELETE":
		for _, k := range own {
			if k.ID != parts[0] {
				continue
			}
			if err := s.store.DeleteAPIKey(rctx, k.ID); err != nil {
				s.keyStorageError(ctx, err)
				return
			}
			s.keysChanged(rctx, "deleted "+k.ID)
			s.log.Info("console: api key revoked", "user", p.user.Name, "key", k.ID)
			ctx.SetStatusCode(204)
			return
		}
		writeError(ctx, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "You have no key with that id."})
	case len(parts) <= 1:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// currency returns the configured currency of balances.
func (s *Server) currency(rctx context.Context) string {
	if c, err := s.store.GetSetting(rctx, storage.SettingCurrency); err == nil && c != "" {
		return c
	}
	return storage.DefaultCurrency
}

// consoleLedgerJSON is a ledger row as its user sees it: who made it is
// the operator's business (the admin API shows it).
type consoleLedgerJSON struct {
	ID        int64     `json:"id"`
	Kind      string    `json:"kind"`
	Amount    string    `json:"amount"`
	Micro     int64     `json:"amount_micro"`
	Note      string    `json:"note"`
	RequestID string    `json:"request_id"`
	CreatedAt time.Time `json:"created_at"`
}

// consoleBalance serves GET /api/console/balance?limit=&before=: the
// balance and a page of the user's ledger rows, newest first (limit,
// default 20, at most 1000; before: the previous page's next_before),
// paged as the admin API pages a user's ledger (ledgerPageQuery).
func (s *Server) consoleBalance(ctx *fasthttp.RequestCtx, rctx context.Context, p *consolePrincipal) {
	q, aerr := ledgerPageQuery(ctx.QueryArgs(), p.user.ID, 20)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	bal, err := s.store.Balance(rctx, p.user.ID)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	rows, next, err := s.readLedgerPage(rctx, q)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	out := make([]consoleLedgerJSON, 0, len(rows))
	for _, r := range rows {
		out = append(out, consoleLedgerJSON{ID: r.ID, Kind: string(r.Kind), Amount: billing.FormatAmount(r.Amount), Micro: r.Amount,
			Note: r.Note, RequestID: r.RequestID, CreatedAt: r.CreatedAt})
	}
	writeJSON(ctx, 200, map[string]any{"balance": billing.FormatAmount(bal), "balance_micro": bal, "currency": s.currency(rctx),
		"ledger": out, "next_before": next})
}

// consoleRecordJSON is one of the user's requests: which of its keys, the
// model, the outcome, the tokens and the cost; never the serving account.
type consoleRecordJSON struct {
	RequestID    string    `json:"request_id"`
	At           time.Time `json:"at"`
	KeyID        string    `json:"key_id"`
	Key          string    `json:"key"` // the key's name ("" when revoked)
	Model        string    `json:"model"`
	Route        string    `json:"route"`
	Stream       bool      `json:"stream"`
	Status       int       `json:"status"`
	LatencyMs    float64   `json:"latency_ms"`
	InputTokens  int64     `json:"input_tokens"`
	CachedTokens int64     `json:"cached_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	Estimated    bool      `json:"estimated"`
	Cost         string    `json:"cost"`
	CostMicro    int64     `json:"cost_micro"`
}

// consoleUsage serves GET /api/console/usage?from=&to=&model=&limit=&cursor=:
// the user's own request log, newest first, paged as the admin request log.
func (s *Server) consoleUsage(ctx *fasthttp.RequestCtx, rctx context.Context, p *consolePrincipal) {
	a := ctx.QueryArgs()
	q := storage.UsageRecordQuery{UserID: p.user.ID, Model: string(a.Peek("model"))}
	if aerr := pageArgs(a, &q); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	recs, err := s.store.ListUsageRecords(rctx, q)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	own, err := s.ownKeys(rctx, p.user)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	names := map[string]string{}
	for _, k := range own {
		names[k.ID] = strings.TrimPrefix(k.Name, consoleKeyPrefix(p.user))
	}
	out := make([]consoleRecordJSON, 0, len(recs))
	for _, r := range recs {
		out = append(out, consoleRecordJSON{RequestID: r.RequestID, At: r.At, KeyID: r.KeyID, Key: names[r.KeyID], Model: r.Model, Route: r.Route,
			Stream: r.Stream, Status: r.Status, LatencyMs: float64(r.Latency.Microseconds()) / 1000, InputTokens: r.InputTokens,
			CachedTokens: r.CachedTokens, OutputTokens: r.OutputTokens, Estimated: r.Estimated, Cost: billing.FormatAmount(r.Cost), CostMicro: r.Cost})
	}
	writeJSON(ctx, 200, map[string]any{"records": out, "next_cursor": nextCursor(recs, q)})
}

// consoleSpend serves GET /api/console/spend?from=&to=&model=: the user's
// daily rollups by model (UTC days, from and to RFC 3339).
func (s *Server) consoleSpend(ctx *fasthttp.RequestCtx, rctx context.Context, p *consolePrincipal) {
	a := ctx.QueryArgs()
	q := storage.UserDailyQuery{UserID: p.user.ID, Model: string(a.Peek("model"))}
	var aerr *APIError
	if q.From, q.To, aerr = fromTo(a); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rows, err := s.store.UserDaily(rctx, q)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	out := make([]spendRow, 0, len(rows))
	var total int64
	for _, r := range rows {
		total += r.Cost
		out = append(out, toSpendRow(r, false))
	}
	writeJSON(ctx, 200, map[string]any{"rows": out, "total": billing.FormatAmount(total), "total_micro": total, "currency": s.currency(rctx)})
}
