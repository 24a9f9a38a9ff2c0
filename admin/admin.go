package admin

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// admin serves /api/admin/*: JSON, Cache-Control: no-store. Login is open;
// every other route takes an admin API key or a logged-in session
// (adminAuth). The routes are listed in docs/admin-api.md.
func (s *Server) admin(ctx *fasthttp.RequestCtx) {
	// Set last: error answers reset the response headers.
	defer ctx.Response.Header.Set("Cache-Control", "no-store")
	path := strings.TrimPrefix(string(ctx.Path()), "/api/admin/")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	method := string(ctx.Method())
	if !(len(parts) == 2 && parts[0] == "accounts" && parts[1] == "import") && refuseRepeatedKeys(ctx) {
		return // an import is not checked: it may be JSON lines or refresh tokens, not one document
	}
	if parts[0] == "login" && len(parts) == 1 {
		s.adminLogin(ctx)
		return
	}
	p, aerr := s.adminAuth(ctx, method)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if aerr := wantJSONBody(ctx, parts); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	switch parts[0] {
	case "ops":
		switch {
		case method != "GET" || len(parts) > 2:
			writeError(ctx, errMethod(method, string(ctx.Path())))
		case len(parts) == 2 && parts[1] == "series":
			s.opsSeries(ctx)
		case len(parts) == 2:
			writeError(ctx, errNotFound(string(ctx.Path())))
		default:
			s.ops(ctx)
		}
	case "policies":
		s.adminPolicies(ctx, method, parts[1:])
	case "logout":
		if method != "POST" || len(parts) != 1 {
			writeError(ctx, errMethod(method, string(ctx.Path())))
			return
		}
		s.adminLogout(ctx, p)
	case "me":
		s.adminMe(ctx, p, method, parts[1:])
	case "accounts":
		s.adminAccounts(ctx, method, parts[1:])
	case "keys":
		s.adminKeys(ctx, method, parts[1:])
	case "usage":
		s.adminUsage(ctx, method, parts[1:])
	case "settings":
		s.adminSettings(ctx, method, parts[1:])
	case "stats":
		s.adminStats(ctx, method, parts[1:])
	case "hygiene":
		s.adminHygiene(ctx, method, parts[1:])
	case "fleet":
		s.adminFleet(ctx, method, parts[1:])
	case "users":
		s.adminUsers(ctx, p, method, parts[1:])
	case "prices":
		s.adminPrices(ctx, method, parts[1:])
	case "price-groups":
		s.adminPriceGroups(ctx, method, parts[1:])
	case "spend":
		s.adminSpend(ctx, method, parts[1:])
	case "invitations":
		s.adminInvitations(ctx, p, method, parts[1:])
	case "registration":
		s.adminRegistration(ctx, p, method, parts[1:])
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// wantJSONBody is the 415 for a request with a body that does not say
// Content-Type: application/json (parameters such as charset allowed), nil
// otherwise. A request without a body (POST …/disable, …/promote) needs no
// content type; an account import (parts "accounts", "import") takes the
// Codex formats too (JSON lines, refresh tokens one per line), whatever it
// is labelled. Every other admin body is JSON, and a text/plain one was
// read as JSON all the same.
func wantJSONBody(ctx *fasthttp.RequestCtx, parts []string) *APIError {
	if len(ctx.Request.Body()) == 0 || (len(parts) == 2 && parts[0] == "accounts" && parts[1] == "import") {
		return nil
	}
	if isJSONType(ctx.Request.Header.ContentType()) {
		return nil
	}
	return &APIError{Status: 415, Type: "invalid_request_error", Code: "unsupported_media_type",
		Message: "The admin API takes JSON bodies: send Content-Type: application/json."}
}

// isJSONType reports whether a Content-Type header value names
// application/json, in any case, with or without parameters.
func isJSONType(ct []byte) bool {
	mt, _, _ := strings.Cut(string(ct), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// writeJSON answers v as JSON with status.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not encode its answer."})
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// maxGroupBytes bounds a routing group's name, on keys, accounts and
// canaries alike (storage refuses longer ones too).
const maxGroupBytes = storage.MaxGroupBytes

// errGroup is the error for a group longer than maxGroupBytes.
func errGroup() *APIError { return errBadParam("group", "A group has at most 200 bytes.") }

// storageError answers a storage failure: 404 and 400 in the client's
// terms, anything else 500 with the error logged (never sent).
func (s *Server) storageError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		writeError(ctx, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "Nothing found at " + clip(string(ctx.Path())) + "."})
	case errors.Is(err, storage.ErrInvalid):
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid", Message: "The request was refused by storage validation."})
	default:
		s.log.Error("admin storage", "err", err)
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "Storage error; see the gateway log."})
	}
}
