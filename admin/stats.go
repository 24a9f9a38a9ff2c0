package admin

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/stats"
	"github.com/valyala/fasthttp"
)

// statsWindow reads the window query parameter (default 1h); it answers a
// 400 and returns false for an unknown window.
func statsWindow(ctx *fasthttp.RequestCtx) (stats.Window, bool) {
	name := string(ctx.QueryArgs().Peek("window"))
	if name == "" {
		name = "1h"
	}
	w, ok := stats.WindowNamed(name)
	if !ok {
		names := make([]string, len(stats.Windows))
		for i, w := range stats.Windows {
			names[i] = w.Name
		}
		writeError(ctx, errBadParam("window", "The window must be one of "+strings.Join(names, ", ")+"."))
	}
	return w, ok
}

// noStats answers 503 when the admin API was built without statistics.
func (s *Server) noStats(ctx *fasthttp.RequestCtx) bool {
	if s.stats == nil {
		writeError(ctx, &APIError{Status: 503, Type: "server_error", Code: "unavailable", Message: "Statistics are not kept by this server."})
		return true
	}
	return false
}

// source says where statistics come from: the short windows (5m, 1h) are
// this instance's own (each instance counts the attempts it made), kept
// since it started; the long ones (6h, 24h, 7d) are read from storage,
// every instance's attempts.
type source struct {
	Instance string    `json:"instance"` // Deps.Instance: the host name unless OTEL_RESOURCE_ATTRIBUTES names it
	Since    time.Time `json:"since"`    // when this instance began counting the short windows (its start)
}

func (s *Server) source() source { return source{Instance: s.inst, Since: s.stats.Since()} }

// accountStatsJSON is the answer of GET /api/admin/accounts/{id or name}/stats.
type accountStatsJSON struct {
	source
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Provider string          `json:"provider"`
	Window   string          `json:"window"`  // the window Points cover
	StepS    int64           `json:"step_s"`  // the width of a point, in seconds
	Windows  []stats.Summary `json:"windows"` // every window, shortest first
	Points   []stats.Point   `json:"points"`  // Window's buckets, oldest first
}

// accountStats serves GET /api/admin/accounts/{id or name}/stats?window=1h:
// the account's summaries over every window and the chart points of one.
func (s *Server) accountStats(ctx *fasthttp.RequestCtx, rctx context.Context, id string) {
	if s.noStats(ctx) {
		return
	}
	w, ok := statsWindow(ctx)
	if !ok {
		return
	}
	a, err := s.store.GetAccount(rctx, id)
	if err != nil {
		s.accountStorageError(ctx, err)
		return
	}
	now := s.now()
	out := accountStatsJSON{source: s.source(), ID: a.ID, Name: a.Name, Provider: string(a.Provider), Window: w.Name, StepS: int64(w.Step().Seconds()),
		Windows: make([]stats.Summary, len(stats.Windows))}
	if out.Points, err = s.stats.AccountPoints(rctx, a.ID, w, now); err != nil {
		s.storageError(ctx, err)
		return
	}
	for i, ww := range stats.Windows {
		if out.Windows[i], err = s.stats.Account(rctx, a.ID, ww, now); err != nil {
			s.storageError(ctx, err)
			return
		}
	}
	writeJSON(ctx, 200, out)
}

// providerStatsJSON is one provider's row of GET /api/admin/stats/providers.
type providerStatsJSON struct {
	Provider string `json:"provider"`
	stats.Summary
}

// adminStats serves /api/admin/stats/…: providers (every provider's summary
// over a window) and accounts (every account's brief over a window, by
// account ID, for the accounts table).
func (s *Server) adminStats(ctx *fasthttp.RequestCtx, method string, parts []string) {
	if method != "GET" || len(parts) != 1 {
		if len(parts) == 1 && (parts[0] == "providers" || parts[0] == "accounts") {
			writeError(ctx, errMethod(method, string(ctx.Path())))
		} else {
			writeError(ctx, errNotFound(string(ctx.Path())))
		}
		return
	}
	switch parts[0] {
	case "providers", "accounts":
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
		return
	}
	if s.noStats(ctx) {
		return
	}
	w, ok := statsWindow(ctx)
	if !ok {
		return
	}
	now := s.now()
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if parts[0] == "accounts" {
		briefs, err := s.stats.Briefs(rctx, w, now)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		writeJSON(ctx, 200, map[string]any{"window": w.Name, "instance": s.inst, "since": s.stats.Since(), "accounts": briefs})
		return
	}
	names, err := s.stats.Providers(rctx, w, now)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	sort.Strings(names)
	rows := make([]providerStatsJSON, len(names))
	for i, p := range names {
		if rows[i].Summary, err = s.stats.Provider(rctx, p, w, now); err != nil {
			s.storageError(ctx, err)
			return
		}
		rows[i].Provider = p
	}
	writeJSON(ctx, 200, map[string]any{"window": w.Name, "instance": s.inst, "since": s.stats.Since(), "providers": rows})
}
