package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/actors"
)

// AffinityTTL is how long the gateway remembers which account served a
// Responses answer, so a follow-up naming it in previous_response_id goes to
// the account that holds its state.
const AffinityTTL = 6 * time.Hour

const affinityPrefix = "aff:resp:"

// affinityOwnerSep separates the account from the API key that asked for
// the response in an affinity value ("<account id>|<key id>"); neither id
// holds it.
const affinityOwnerSep = "|"

// remember records that account served response id to the API key keyID
// (best effort: a cache failure only costs the follow-up its preference),
// at once: a stream does so before relaying its response.completed, since
// the client may name the response in its next request, on any instance.
func (s *Server) remember(id, account, keyID string) {
	if s.cache == nil || responseKey(id) == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.cache.Set(ctx, responseKey(id), responseValue(account, keyID), AffinityTTL); err != nil {
		s.log.Debug("affinity not recorded", "err", err)
	}
}

// responseValue is the affinity entry of a response account served to
// the API key keyID.
func responseValue(account, keyID string) string { return account + affinityOwnerSep + keyID }

// responseKey is the cache key of response id's affinity entry, "" when
// id cannot have one.
func responseKey(id string) string {
	if id == "" || len(id) > 256 {
		return ""
	}
	return affinityPrefix + id
}

// errPreviousResponseNotFound is the answer to a previous_response_id that
// another API key asked for: the OpenAI API's own 400 for an id it does not
// know (https://platform.openai.com/docs/api-reference/responses/create), so
// a key learns nothing of other keys' responses and cannot continue them.
func errPreviousResponseNotFound(id string) *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "previous_response_not_found", Param: "previous_response_id",
		Message: "Previous response with id '" + clip(id) + "' not found."}
}

// DefaultSessionAffinityTTL is how long a client session stays with the
// account that last served it when Config.SessionAffinityTTL is 0: 1 hour.
const DefaultSessionAffinityTTL = time.Hour

const sessionAffinityPrefix = "aff:sess:"

// errPreviousResponseUnavailable is the answer to a previous_response_id
// whose state lives on an account that cannot serve now: 409, so the client
// knows to resend the full input without previous_response_id (the OpenAI
// API itself answers an unknown id with 400 previous_response_not_found;
// docs/affinity.md explains the difference).
func errPreviousResponseUnavailable(id string) *APIError {
	return &APIError{Status: 409, Type: "invalid_request_error", Code: "previous_response_not_found", Param: "previous_response_id",
		Message: "Previous response with id '" + clip(id) + "' is held by an upstream account that is not available now. Resend the full input without previous_response_id."}
}

// pinKey is the affinity entry pin needs for c: the owner of its
// previous_response_id, else its session's last account ("" for none).
// admit reads it in the request's one round trip before routing.
func pinKey(c *call) string {
	if c.prevResp != "" {
		return responseKey(c.prevResp)
	}
	return c.sessionEntry()
}

// sessionEntry is the cache key of c's session affinity ("" without a
// session), made once per request.
func (c *call) sessionEntry() string {
	if c.sessionKey == "" && c.session != "" {
		c.sessionKey = sessionCacheKey(c.session)
	}
	return c.sessionKey
}

// pin applies affinity to c before routing (docs/affinity.md), given the
// value of its pinKey entry: a previous_response_id the gateway has seen
// must go to the account that served it, and only there — while that
// account is usable; otherwise 409. A session key (session headers,
// prompt_cache_key) prefers the account that served the session last, so
// its prompt cache stays warm; that preference yields when the account is
// not available.
func (s *Server) pin(c *call, entry string) *APIError {
	if c.prevResp != "" {
		// "<account id>|<key id>"; a value written before the key was
		// recorded has no key.
		owner, keyID, _ := strings.Cut(entry, affinityOwnerSep)
		if owner == "" {
			return nil // not ours (or expired): the upstream answers whether it knows the id
		}
		if keyID != "" && keyID != c.key.ID {
			return errPreviousResponseNotFound(c.prevResp) // another key's response
		}
		if !s.usable(owner) {
			return errPreviousResponseUnavailable(c.prevResp)
		}
		c.prefer, c.only, c.owner = owner, owner, owner
		return nil
	}
	c.prefer = entry
	c.owner = c.prefer // the session's account-bound state is its last account's (gateway/state.go)
	return nil
}

// usable reports whether account id is in the pool and can take leases now
// or once a running lease ends (active, or cooling with the cooldown over).
func (s *Server) usable(id string) bool {
	v, ok := s.sys.View(id)
	if !ok {
		return false
	}
	switch v.Status {
	case actors.StatusActive:
		return true
	case actors.StatusCooling:
		return !s.now().Before(v.CooldownUntil)
	}
	return false
}

// sessionCacheKey hashes a client's session key, so keys of any length and
// content make bounded cache keys.
func sessionCacheKey(session string) string {
	h := sha256.Sum256([]byte(session))
	return sessionAffinityPrefix + hex.EncodeToString(h[:16])
}
