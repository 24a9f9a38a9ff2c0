package admin

import (
	"context"
	"errors"

	"github.com/troupe-gw/troupe/hygiene"
	"github.com/valyala/fasthttp"
)

// hygieneJSON is GET /api/admin/hygiene: the account hygiene rule and the
// accounts it tripped on (docs/admin-api.md#account-hygiene).
type hygieneJSON struct {
	Rule  hygieneRuleJSON `json:"rule"`
	Flags []hygiene.Flag  `json:"flags"`
}

// hygieneRuleJSON is hygiene.Rule with durations as Go duration strings.
type hygieneRuleJSON struct {
	Action            string `json:"action"`
	UnauthorizedAfter string `json:"unauthorized_after"`
	RateLimitedAfter  string `json:"rate_limited_after"`
	Interval          string `json:"interval"`
}

// adminHygiene serves GET /api/admin/hygiene.
func (s *Server) adminHygiene(ctx *fasthttp.RequestCtx, method string, parts []string) {
	switch {
	case len(parts) > 0:
		writeError(ctx, errNotFound(string(ctx.Path())))
	case method != "GET":
		writeError(ctx, errMethod(method, string(ctx.Path())))
	case s.hygiene == nil:
		writeError(ctx, errNoHygiene())
	default:
		flags, err := s.hygiene.Flags(ctx)
		if err != nil {
			s.log.Error("hygiene flags", "err", err)
			writeError(ctx, &APIError{Status: 503, Type: "server_error", Message: "The hygiene flags could not be read from storage; retry."})
			return
		}
		r := s.hygiene.Rule()
		writeJSON(ctx, 200, hygieneJSON{Rule: hygieneRuleJSON{Action: r.Action, UnauthorizedAfter: r.Unauthorized.String(),
			RateLimitedAfter: r.RateLimited.String(), Interval: r.Interval.String()}, Flags: flags})
	}
}

// restoreAccount serves POST /api/admin/accounts/{id or name}/restore: the
// account back in service in one call (hygiene.Keeper.Restore): its
// hygiene flag cleared, enabled, its live state reset to active.
func (s *Server) restoreAccount(ctx *fasthttp.RequestCtx, rctx context.Context, id string) {
	if s.hygiene == nil {
		writeError(ctx, errNoHygiene())
		return
	}
	flag, had, err := s.hygiene.Restore(rctx, id)
	switch {
	case errors.Is(err, hygiene.ErrNotFound):
		writeError(ctx, errNotFound(string(ctx.Path())))
		return
	case err != nil:
		s.log.Error("restore account", "account", id, "err", err)
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The account could not be restored; see the server log."})
		return
	}
	s.accountsChanged()
	out := map[string]any{"restored": true, "flag": nil}
	if had {
		out["flag"] = flag
	}
	writeJSON(ctx, 200, out)
}

// hygieneFlag is account id's hygiene flag, nil when it has none (or the
// flags cannot be read: the account's answer does not fail for it).
func (s *Server) hygieneFlag(ctx context.Context, id string) *hygiene.Flag {
	if s.hygiene == nil {
		return nil
	}
	f, ok, err := s.hygiene.Flag(ctx, id)
	if err != nil {
		s.log.Warn("hygiene flag", "account", id, "err", err)
	}
	if ok {
		return &f
	}
	return nil
}

// hygieneFlags are the hygiene flags by account ID (none without a rule,
// or when storage cannot say: the list does not fail for it).
func (s *Server) hygieneFlags(ctx context.Context) map[string]hygiene.Flag {
	if s.hygiene == nil {
		return nil
	}
	flags, err := s.hygiene.Flags(ctx)
	if err != nil {
		s.log.Warn("hygiene flags", "err", err)
	}
	out := make(map[string]hygiene.Flag, len(flags))
	for _, f := range flags {
		out[f.AccountID] = f
	}
	return out
}

func errNoHygiene() *APIError {
	return &APIError{Status: 503, Type: "server_error", Code: "unavailable", Message: "Account hygiene is not available on this server."}
}
