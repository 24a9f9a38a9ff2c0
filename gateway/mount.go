package gateway

import (
	"strconv"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// Mount serves paths beside /v1 on the front: the admin API and console
// (package admin). The front keeps the server, its body limits and its
// error shapes, and hands a mount the requests to the paths it owns. Its
// methods are called concurrently, from fasthttp's goroutines.
type Mount interface {
	// Owns reports whether path (the request's, as fasthttp parsed it) is
	// the mount's. The front asks only about paths that are not its own
	// (/v1/…, /healthz, /readyz, /metrics), once per such request.
	Owns(path []byte) bool
	// Serve answers a request to a path the mount owns.
	Serve(ctx *fasthttp.RequestCtx)
	// FullBody reports, from a request's head alone (before its body is
	// read; the path is in h.RequestURI()), whether a request without a
	// valid API key may send a body up to Config.MaxBodySize instead of
	// UnauthenticatedBodyLimit: a logged-in admin importing accounts.
	FullBody(h *fasthttp.RequestHeader) bool
	// Unread answers a request to a path the mount owns that fasthttp
	// could not read (err is fasthttp's: a body over the limit, a timeout,
	// a malformed request). front writes the front's own answer, for the
	// mount to call or replace.
	Unread(ctx *fasthttp.RequestCtx, err error, front func(*fasthttp.RequestCtx, error))
}

// SetMount installs the mount served beside /v1 (nil: none; its paths get
// 404). Call it before Serve.
func (s *Server) SetMount(m Mount) { s.mount = m }

// Authenticate resolves the request's API key (Authorization: Bearer or
// x-api-key) through the front's key cache, as the /v1 handlers do; a
// disabled, expired or unknown key is refused. Errors are client-facing.
func (s *Server) Authenticate(ctx *fasthttp.RequestCtx) (storage.APIKey, *APIError) {
	return s.authenticate(ctx)
}

// BodyLimit is the request body limit in bytes (Config.MaxBodySize after
// its default).
func (s *Server) BodyLimit() int { return s.cfg.MaxBodySize }

// Outcomes are the front's counts of upstream attempts and failovers, for
// the admin API's ops view.
type Outcomes struct {
	// Failures counts upstream attempts by outcome class ("ok" for
	// successes, else upstream.Class names) over the last 1, 5, 15 and 60
	// minutes, keyed "1m", "5m", "15m" and "60m".
	Failures map[string]map[string]int64
	// Failovers counts client requests by the extra attempts they needed
	// ("0", "1", "2", "3", "4+") since start.
	Failovers map[string]int64
}

// Outcomes returns the attempt and failover counts as of now.
func (s *Server) Outcomes(now time.Time) Outcomes {
	o := Outcomes{Failures: map[string]map[string]int64{}, Failovers: map[string]int64{}}
	for _, m := range []int{1, 5, 15, 60} {
		sums := s.classes.sum(now, m)
		row := map[string]int64{}
		for c, n := range sums {
			name := upstream.Class(c).String()
			if c == 0 {
				name = "ok"
			}
			row[name] = n
		}
		o.Failures[strconv.Itoa(m)+"m"] = row
	}
	for i := range s.failovers {
		label := strconv.Itoa(i)
		if i == len(s.failovers)-1 {
			label += "+"
		}
		o.Failovers[label] = s.failovers[i].Load()
	}
	return o
}

// The front's error answers, for a mount to answer in the same shape and
// words (the /api/admin/ paths take OpenAI's shape: anthropicClient).

// WriteError renders e in the client's error shape, keeping the response's
// X-Request-Id.
func WriteError(ctx *fasthttp.RequestCtx, e *APIError) { writeError(ctx, e) }

// ClientSecret returns the API key the client sent ("Authorization: Bearer
// K" or "x-api-key: K"), nil when none. The slice is the request header's:
// valid until the handler returns.
func ClientSecret(ctx *fasthttp.RequestCtx) []byte { return clientSecret(ctx) }

// ErrBadParam is 400 invalid_type for a parameter (param) with msg.
func ErrBadParam(param, msg string) *APIError { return errBadParam(param, msg) }

// ErrNotFound is 404 unknown_url for path.
func ErrNotFound(path string) *APIError { return errNotFound(path) }

// ErrMethod is 405 method_not_allowed for method on path.
func ErrMethod(method, path string) *APIError { return errMethod(method, path) }

// ErrTooLarge is 413 request_too_large naming the limit in bytes.
func ErrTooLarge(limit int) *APIError { return errTooLarge(limit) }

// Clip shortens client-supplied text quoted in an error to 256 bytes.
func Clip(s string) string { return clip(s) }
