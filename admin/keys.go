package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// KeysChannel is the cache pub/sub channel on which API-key changes are
// announced, so every instance drops its cached key lookups at once (the
// same channel "troupe keys" announces on).
const KeysChannel = "keys"

// AccountsChannel is the cache pub/sub channel on which account changes
// are announced (every stored put or delete of an account, by any
// instance's admin API, hygiene or token refresh, and by the CLI with a
// shared cache): each instance then reads the storage's account change
// feed at once (docs/fleet.md#account-changes). The message ("put <id>
// <version>" or "delete <id or name>") is informative only.
const AccountsChannel = "accounts"

// limitsJSON are a key's limits; 0 means unlimited.
type limitsJSON struct {
	RPM          int64 `json:"rpm"`
	RPD          int64 `json:"rpd"`
	TokensPerDay int64 `json:"tokens_per_day"`
}

// keyJSON is an API key as the admin API shows it: never the secret or its hash.
type keyJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"` // the secret's first characters, to recognise it
	Group     string     `json:"group"`
	Models    []string   `json:"models"` // allowlist; empty: every model
	Disabled  bool       `json:"disabled"`
	ExpiresAt *time.Time `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
	Limits    limitsJSON `json:"limits"`
	Admin     bool       `json:"admin"`
	UserID    string     `json:"user_id"` // the owning user's id; "" for an operator key
	State     string     `json:"state"`   // active, disabled or expired
	// Version is the key's revision (storage.APIKey.Revision): send it
	// back in a PATCH to have the edit refused with 409 edit_conflict if
	// the key changed since.
	Version int64 `json:"version"`
}

func toKeyJSON(k storage.APIKey, now time.Time) keyJSON {
	j := keyJSON{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Group: k.Group, Models: nonNil(k.Models), Disabled: k.Disabled,
		ExpiresAt: k.ExpiresAt, CreatedAt: k.CreatedAt, Limits: limitsJSON{k.Limits.RPM, k.Limits.RPD, k.Limits.TokensPerDay}, Admin: k.Admin, UserID: k.UserID, State: "active", Version: k.Revision}
	switch {
	case k.Disabled:
		j.State = "disabled"
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		j.State = "expired"
	}
	return j
}

// keyInput is the body of POST and PATCH /api/admin/keys: absent fields
// keep their value (their zero value on create). expires_at is an RFC 3339
// time or null (never); expires_in a Go duration ("720h") from now.
type keyInput struct {
	Name      *string     `json:"name"`
	Group     *string     `json:"group"`
	Models    *[]string   `json:"models"`
	Disabled  *bool       `json:"disabled"`
	ExpiresAt *string     `json:"expires_at"`
	ExpiresIn *string     `json:"expires_in"`
	Limits    *limitsJSON `json:"limits"`
	Admin     *bool       `json:"admin"`
	// User is the owning user (id, name or email), on create only: the key
	// then spends that user's balance at the user's prices, as one made
	// with troupe keys create --user or in the user's console.
	User *string `json:"user"`
	// Version is the key's version as read, on edit: a key changed since
	// is a 409 edit_conflict. Ignored on create.
	Version *int64 `json:"version"`
	// clearExpiry is set when the body holds "expires_at": null.
	clearExpiry bool
}

func decodeKeyInput(b []byte) (keyInput, *APIError) {
	var in keyInput
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return in, errBadParam("body", "The body must be a JSON object of key fields: "+jsonDecodeError(err))
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) == nil {
		if v, ok := raw["expires_at"]; ok && string(v) == "null" {
			in.clearExpiry = true
		}
	}
	return in, nil
}

func (in *keyInput) apply(k *storage.APIKey, now time.Time) *APIError {
	set(&k.Name, in.Name)
	set(&k.Group, in.Group)
	set(&k.Models, in.Models)
	set(&k.Disabled, in.Disabled)
	set(&k.Admin, in.Admin)
	if in.Limits != nil {
		k.Limits = storage.KeyLimits{RPM: in.Limits.RPM, RPD: in.Limits.RPD, TokensPerDay: in.Limits.TokensPerDay}
	}
	switch {
	case in.ExpiresAt != nil && in.ExpiresIn != nil:
		return errBadParam("expires_at", "Give expires_at or expires_in, not both.")
	case in.ExpiresAt != nil:
		t, err := time.Parse(time.RFC3339, *in.ExpiresAt)
		if err != nil {
			return errBadParam("expires_at", "expires_at is an RFC 3339 time (2026-12-31T00:00:00Z) or null.")
		}
		t = t.UTC()
		k.ExpiresAt = &t
	case in.ExpiresIn != nil:
		d, err := time.ParseDuration(*in.ExpiresIn)
		if err != nil || d <= 0 {
			return errBadParam("expires_in", `expires_in is a positive duration such as "720h".`)
		}
		t := now.Add(d).UTC()
		k.ExpiresAt = &t
	case in.clearExpiry:
		k.ExpiresAt = nil
	}
	k.Name = strings.TrimSpace(k.Name)
	if k.Name == "" || len(k.Name) > 200 {
		return errBadParam("name", "A key needs a name of 1 to 200 bytes.")
	}
	if err := k.Limits.Validate(); err != nil {
		return errBadParam("limits", "Limits must not be negative.")
	}
	if !storage.TextOK(k.Name, k.Group) || !storage.TextOK(k.Models...) {
		return errBadParam("name", "Name, group and models must be UTF-8 text without NUL bytes.")
	}
	if aerr := errEmptyEntry("models", k.Models); aerr != nil {
		return aerr
	}
	if len(k.Group) > maxGroupBytes {
		return errGroup()
	}
	if k.Admin && k.UserID != "" {
		return errBadParam("admin", "A user's key cannot be an admin key: it could change its own balance. Create an operator key for admin access.")
	}
	return nil
}

// adminKeys serves /api/admin/keys (docs/admin-api.md, "API keys").
func (s *Server) adminKeys(ctx *fasthttp.RequestCtx, method string, parts []string) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := s.now()
	switch {
	case len(parts) == 0 && method == "GET":
		s.listKeys(ctx, rctx, now)
	case len(parts) == 0 && method == "POST":
		s.createKey(ctx, rctx, now)
	case len(parts) >= 1:
		s.keyRoute(ctx, rctx, method, parts, now)
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	}
}

// listKeys serves GET /api/admin/keys?q=: every key, or those whose name
// contains q or whose prefix starts with it.
func (s *Server) listKeys(ctx *fasthttp.RequestCtx, rctx context.Context, now time.Time) {
	keys, err := s.store.ListAPIKeys(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	q := strings.ToLower(string(ctx.QueryArgs().Peek("q")))
	out := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		if q == "" || strings.Contains(strings.ToLower(k.Name), q) || strings.HasPrefix(k.Prefix, q) {
			out = append(out, toKeyJSON(k, now))
		}
	}
	writeJSON(ctx, 200, map[string]any{"keys": out})
}

// createKey serves POST /api/admin/keys: a new key (keyInput) and its
// secret, shown this once.
func (s *Server) createKey(ctx *fasthttp.RequestCtx, rctx context.Context, now time.Time) {
	in, aerr := decodeKeyInput(ctx.PostBody())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if in.Name == nil {
		writeError(ctx, errBadParam("name", "A key needs a name."))
		return
	}
	secret, k, err := gateway.NewKey(*in.Name)
	if err != nil {
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not create a key."})
		return
	}
	if in.User != nil && *in.User != "" {
		u, err := s.store.GetUser(rctx, *in.User)
		if errors.Is(err, storage.ErrNotFound) {
			writeError(ctx, errBadParam("user", "No user has this id, name or email (GET /api/admin/users lists them)."))
			return
		}
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		k.UserID = u.ID
	}
	if aerr := in.apply(&k, now); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	stored, err := s.store.CreateAPIKey(rctx, k)
	if err != nil {
		s.keyStorageError(ctx, err)
		return
	}
	s.keysChanged(rctx, "created "+stored.ID)
	s.log.Info("admin: api key created", "key", stored.Name, "admin", stored.Admin, "user_id", stored.UserID)
	writeJSON(ctx, 201, map[string]any{"key": toKeyJSON(stored, now), "secret": secret})
}

// keyRoute serves /api/admin/keys/{id or name}[/enable|/disable]: GET,
// PATCH (or PUT) with keyInput, POST enable or disable, DELETE.
func (s *Server) keyRoute(ctx *fasthttp.RequestCtx, rctx context.Context, method string, parts []string, now time.Time) {
	k, err := s.findKey(rctx, parts[0])
	if err != nil {
		s.keyStorageError(ctx, err)
		return
	}
	switch {
	case len(parts) == 1 && method == "GET":
		writeJSON(ctx, 200, toKeyJSON(k, now))
	case len(parts) == 1 && (method == "PATCH" || method == "PUT"):
		in, aerr := decodeKeyInput(ctx.PostBody())
		if aerr == nil && in.User != nil {
			aerr = errBadParam("user", "A key's owner is set when the key is created; create a key for the other owner instead.")
		}
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		s.editKey(ctx, rctx, k, now, func(k *storage.APIKey) *APIError {
			if in.Version != nil && *in.Version != k.Revision {
				return errEditConflict("API key", k.Name, *in.Version, k.Revision)
			}
			return in.apply(k, now)
		}, in.Version == nil)
	case len(parts) == 2 && (parts[1] == "enable" || parts[1] == "disable") && method == "POST":
		s.editKey(ctx, rctx, k, now, func(k *storage.APIKey) *APIError {
			k.Disabled = parts[1] == "disable"
			return nil
		}, true)
	case len(parts) == 1 && method == "DELETE":
		if err := s.store.DeleteAPIKey(rctx, k.ID); err != nil {
			s.keyStorageError(ctx, err)
			return
		}
		s.keysChanged(rctx, "deleted "+k.ID)
		s.log.Info("admin: api key deleted", "key", k.Name)
		writeJSON(ctx, 200, map[string]any{"deleted": k.ID, "name": k.Name})
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	}
}

// editKey reads key k afresh under its edit lock, changes it with change
// (whose error is the answer) and stores it with updateKey, in a write
// conditional on the revision read. When another instance changed the key
// between the read and the write, it reads and changes it again if retry
// (an edit without the editor's version), else answers 409 edit_conflict.
func (s *Server) editKey(ctx *fasthttp.RequestCtx, rctx context.Context, k storage.APIKey, now time.Time, change func(*storage.APIKey) *APIError, retry bool) {
	for attempt := 1; ; attempt++ {
		unlock, err := s.lockKey(rctx, &k)
		if err != nil {
			s.keyStorageError(ctx, err)
			return
		}
		if aerr := change(&k); aerr != nil {
			unlock()
			writeError(ctx, aerr)
			return
		}
		k.IfRevision = k.Revision
		stored, err := s.store.UpdateAPIKey(rctx, k)
		unlock()
		if errors.Is(err, storage.ErrStale) {
			if retry && attempt < maxEditAttempts {
				continue
			}
			cur := k.Revision
			if fresh, ferr := s.findKey(rctx, k.ID); ferr == nil {
				cur = fresh.Revision
			}
			writeError(ctx, errEditConflict("API key", k.Name, k.Revision, cur))
			return
		}
		s.updatedKey(ctx, rctx, stored, err, now)
		return
	}
}

// updatedKey answers an update of a key: on success it drops every
// instance's cached lookups and answers the key.
func (s *Server) updatedKey(ctx *fasthttp.RequestCtx, rctx context.Context, stored storage.APIKey, err error, now time.Time) {
	if err != nil {
		s.keyStorageError(ctx, err)
		return
	}
	s.keysChanged(rctx, "updated "+stored.ID)
	s.log.Info("admin: api key updated", "key", stored.Name, "disabled", stored.Disabled)
	writeJSON(ctx, 200, toKeyJSON(stored, now))
}

// lockKey takes the edit lock of key *k and reads it afresh under it into
// *k (recordLocks); unlock is nil on error.
func (s *Server) lockKey(rctx context.Context, k *storage.APIKey) (unlock func(), err error) {
	unlock = s.edits.lock("key:" + k.ID)
	fresh, err := s.findKey(rctx, k.ID)
	if err != nil {
		unlock()
		return nil, err
	}
	*k = fresh
	return unlock, nil
}

// findKey returns the key with the given ID or, else, name.
func (s *Server) findKey(ctx context.Context, idOrName string) (storage.APIKey, error) {
	keys, err := s.store.ListAPIKeys(storeCtx(ctx))
	if err != nil {
		return storage.APIKey{}, err
	}
	if i := slices.IndexFunc(keys, func(k storage.APIKey) bool { return k.ID == idOrName }); i >= 0 {
		return keys[i], nil
	}
	if i := slices.IndexFunc(keys, func(k storage.APIKey) bool { return k.Name == idOrName }); i >= 0 {
		return keys[i], nil
	}
	return storage.APIKey{}, storage.ErrNotFound
}

// keysChanged drops this instance's cached key lookups and tells the others.
func (s *Server) keysChanged(ctx context.Context, msg string) {
	s.front.InvalidateKeys()
	if s.cache != nil {
		if err := s.cache.Publish(ctx, KeysChannel, msg); err != nil {
			s.log.Warn("api key broadcast failed; other instances see the change within 30 s", "err", err)
		}
	}
}

func (s *Server) keyStorageError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		writeError(ctx, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No such API key."})
	case errors.Is(err, storage.ErrConflict):
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Param: "name", Message: "A key with this name exists."})
	case errors.Is(err, storage.ErrInvalid):
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid", Message: "The key was refused: " + clip(storageReason(err))})
	default:
		s.storageError(ctx, err)
	}
}
