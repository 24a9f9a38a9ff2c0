// Package admin is Troupe's admin API (/api/admin/…: accounts, keys,
// policies and canaries, usage, settings, ops, login and sessions), the
// users' console API (/api/console/…: console.go) and the
// admin console it serves at /admin. It is mounted on the gateway's front
// (gateway.Mount), which keeps the server, the body limits and the error
// shapes; everything else it needs comes in Deps, so the /v1 hot path
// imports none of it. docs/admin-api.md lists the routes.
package admin

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/hygiene"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/stats"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// Front is what the admin API needs of the /v1 front (*gateway.Server).
type Front interface {
	// Authenticate resolves the request's API key through the front's key
	// cache; errors are client-facing.
	Authenticate(ctx *fasthttp.RequestCtx) (storage.APIKey, *gateway.APIError)
	// InvalidateKeys drops the cached API-key lookups.
	InvalidateKeys()
	// Outcomes are the front's attempt and failover counts.
	Outcomes(now time.Time) gateway.Outcomes
	// BodyLimit is the request body limit in bytes.
	BodyLimit() int
}

// Pool is what the admin API reads and changes of the running pool
// (*actors.System).
type Pool interface {
	// Views returns every account's published state.
	Views() []actors.View
	// EachView calls fn with every account's state, without copying it.
	EachView(fn func(*actors.View))
	// Scores returns the scheduler's verdicts by account ID.
	Scores(ctx context.Context) (map[string]actors.Scored, error)
	// SchedulerStats returns the scheduler's counters.
	SchedulerStats(ctx context.Context) (actors.SchedulerStats, error)
	// PutAccount adds or changes an account in the pool.
	PutAccount(a storage.Account)
	// RemoveAccount takes an account out of the pool.
	RemoveAccount(id string)
}

// Deps are the admin API's dependencies. Front, Pool and Store are
// required.
type Deps struct {
	Front Front
	Pool  Pool
	Store storage.Store
	// Cache holds sessions and login counters and carries the API-key
	// change broadcast (KeysChannel) to other instances; nil: a private
	// in-memory cache, and no broadcast.
	Cache storage.Cache
	// Routing is the routing-policy runtime; nil answers
	// /api/admin/policies with 503.
	Routing *routing.Runtime
	// Stats are the front's attempt statistics (gateway.Server.Stats); nil
	// answers the statistics routes with 503.
	Stats *stats.Store
	// Instance names this instance in the statistics' answers (they count
	// this instance's attempts only): telemetry.InstanceID, the
	// service.instance.id its spans carry.
	Instance string
	// Hygiene is the account hygiene rule (GET /api/admin/hygiene, POST
	// /api/admin/accounts/{id}/restore); nil answers those with 503.
	Hygiene *hygiene.Keeper
	// Billing is this instance's billing gate, reloaded when the admin API
	// changes prices or users (other instances hear billing.Channel); nil:
	// none to reload.
	Billing interface {
		Reload(ctx context.Context) error
	}
	Log *slog.Logger     // nil: slog.Default()
	Now func() time.Time // nil: time.Now
}

// Server serves the admin API and console. Create it with New and install
// it on the front with gateway.Server.SetMount; it is safe for concurrent
// use.
type Server struct {
	front   Front
	sys     Pool
	store   storage.Store
	cache   storage.Cache
	routing *routing.Runtime
	stats   *stats.Store
	inst    string // Deps.Instance
	hygiene *hygiene.Keeper
	billing interface {
		Reload(ctx context.Context) error
	} // Deps.Billing
	log          *slog.Logger
	now          func() time.Time
	adm          adminState                   // sessions' fallback cache, the UI, instance facts, the account list (state.go)
	fleet        atomic.Pointer[fleetState]   // SetFleet (fleet.go)
	fleetRouting atomic.Pointer[fleetRouting] // SetFleetRouting (fleet.go)
	edits        recordLocks                  // one read-modify-write of a record at a time (edits.go)
}

// New builds the admin API over d.
func New(d Deps) *Server {
	s := &Server{front: d.Front, sys: d.Pool, store: d.Store, cache: d.Cache, routing: d.Routing, stats: d.Stats, inst: d.Instance, hygiene: d.Hygiene, billing: d.Billing, log: d.Log, now: d.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

var pathAPI = []byte("/api/admin/")

// isAPIPath reports whether p is under /api/admin/.
func isAPIPath(p []byte) bool { return len(p) > len(pathAPI) && bytes.HasPrefix(p, pathAPI) }

// Owns reports whether path is the admin API's (/api/admin/…), the admin
// console's (/admin, /admin/…), the users' console UI's (/console,
// /console/…) or the users' console API's (/api/console/…)
// (gateway.Mount).
func (s *Server) Owns(path []byte) bool {
	return isAPIPath(path) || isAdminUIPath(path) || isConsolePath(path)
}

// Serve answers a request to a path Owns reports (gateway.Mount).
func (s *Server) Serve(ctx *fasthttp.RequestCtx) {
	switch {
	case isAPIPath(ctx.Path()):
		s.admin(ctx)
	case isConsolePath(ctx.Path()):
		s.console(ctx)
	default:
		s.adminUI(ctx)
	}
}

// FullBody reports whether a request head names an admin route and carries
// a live session cookie (gateway.Mount): a logged-in admin may send bodies
// up to the front's limit (account imports are large).
func (s *Server) FullBody(h *fasthttp.RequestHeader) bool { return s.adminSessionHeader(h) }

// Unread answers a request to an admin path that fasthttp could not read
// (gateway.Mount). A body over the small limit of a request without an API
// key is answered in the admin API's terms: a logged-in session or an admin
// key gets the front's limit, a login the small one, anyone else is asked
// to log in. Every other case is the front's answer; /api/admin/ answers
// are never cached.
func (s *Server) Unread(ctx *fasthttp.RequestCtx, err error, front func(*fasthttp.RequestCtx, error)) {
	if !isAPIPath(ctx.Path()) {
		front(ctx, err)
		return
	}
	defer ctx.Response.Header.Set("Cache-Control", "no-store") // set last: error answers reset the headers
	if !errors.Is(err, fasthttp.ErrBodyTooLarge) {
		front(ctx, err)
		return
	}
	switch {
	case s.adminSessionHeader(&ctx.Request.Header):
		writeError(ctx, gateway.ErrTooLarge(s.front.BodyLimit())) // a logged-in admin's import
	case bytes.Equal(ctx.Path(), []byte("/api/admin/login")):
		// A login needs no credentials: the small limit is the reason.
		writeError(ctx, &APIError{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
			Message: "Request body too large: a login has at most " + strconv.Itoa(gateway.UnauthenticatedBodyLimit) + " bytes."})
	default:
		if k, aerr := s.authenticate(ctx); aerr == nil && k.Admin {
			writeError(ctx, gateway.ErrTooLarge(s.front.BodyLimit())) // an admin key's import
			return
		}
		writeError(ctx, errAdminAuth("Log in (POST /api/admin/login) or send an admin API key; a large body needs one."))
	}
}

// authenticate resolves the request's API key (Front.Authenticate).
func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (storage.APIKey, *APIError) {
	return s.front.Authenticate(ctx)
}

// APIError is the front's client-facing error: the admin API answers in
// OpenAI's error shape, as the front does.
type APIError = gateway.APIError

// The front's error answers under the names the handlers use.

func writeError(ctx *fasthttp.RequestCtx, e *APIError) { gateway.WriteError(ctx, e) }
func errBadParam(param, msg string) *APIError          { return gateway.ErrBadParam(param, msg) }
func errNotFound(path string) *APIError                { return gateway.ErrNotFound(path) }
func errMethod(method, path string) *APIError          { return gateway.ErrMethod(method, path) }
func clip(s string) string                             { return gateway.Clip(s) }
func clientSecret(ctx *fasthttp.RequestCtx) []byte     { return gateway.ClientSecret(ctx) }

// storeCtx returns the context a handler gives storage for ctx: ctx
// itself, unless it is the request's *fasthttp.RequestCtx, which fasthttp
// resets and reuses once the handler returns; then a context that does
// not end with it (context.WithoutCancel). Under a RequestCtx, whose Done
// is not package context's, database/sql watches a query's context on a
// goroutine that can outlive the handler and read the RequestCtx's values
// after the reset (a data race the gateway met under -race; its detach).
func storeCtx(ctx context.Context) context.Context {
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		return context.WithoutCancel(rc)
	}
	return ctx
}
