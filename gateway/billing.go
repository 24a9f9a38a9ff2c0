package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// SetBilling installs the gate that admits, prices and charges the requests
// of users' keys (docs/billing.md); call it before Serve. Without one a
// user's key is refused (an operator key is never billed).
func (s *Server) SetBilling(g *billing.Gate) { s.billing = g }

// admitBilling is the request's billing step before it goes upstream, for
// a key that belongs to a user: the user's state, model allowlist, price,
// RPM and concurrency limits, and its balance against every request of the
// user in flight (billing.Gate.Admit). The ticket it takes is settled by
// logRequest, which every authenticated request reaches exactly once.
func (s *Server) admitBilling(ctx context.Context, c *call) *APIError {
	if c.key.UserID == "" {
		return nil
	}
	if s.billing == nil {
		return errUnusableKey("belongs to a user account, and billing is not running on this gateway")
	}
	// A body that repeats a key anywhere never gets here (parseBody): it is
	// not held on one text and charged for another.
	t, ref := s.billing.Admit(s.detach(ctx), billing.Request{ID: c.id, UserID: c.key.UserID, Model: c.model,
		Input: estimateRequestTokens(c.endpoint, c.body), MaxOutput: c.maxOutput, Choices: c.choices})
	if ref != nil {
		return s.billingRefusal(c, ref)
	}
	c.ticket = t
	return nil
}

// keyUser checks the user a key belongs to on the routes beside the billed
// ones (/v1/messages/count_tokens, /v1/models), which admitBilling does
// not see: nil for an operator key; a user that is disabled, deleted or
// unreadable is refused as admission refuses it (401, or 503
// billing_unavailable), so a disabled user's key is no key anywhere.
func (s *Server) keyUser(ctx context.Context, key *storage.APIKey) (*storage.User, *APIError) {
	if key.UserID == "" {
		return nil, nil
	}
	if s.billing == nil {
		return nil, errUnusableKey("belongs to a user account, and billing is not running on this gateway")
	}
	u, err := s.billing.User(s.detach(ctx), key.UserID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, errUnusableKey("belongs to a user account that no longer exists")
	case err != nil:
		return nil, &APIError{Status: 503, Type: "server_error", Code: "billing_unavailable",
			Message: "The gateway cannot read your account right now. Please try again shortly."}
	case u.Disabled:
		return nil, errUnusableKey("belongs to a disabled user account")
	}
	return &u, nil
}

// billingRefusal is the client-facing error of a refusal, in the client's
// protocol: no balance is OpenAI's 429 insufficient_quota (recorded in the
// shared fixture openai-chat/error-429-insufficient-quota.json), which
// clients treat as final, and Anthropic's 402 billing_error for Messages.
func (s *Server) billingRefusal(c *call, r *billing.Refusal) *APIError {
	switch r.Kind {
	case billing.RefusedUnknown:
		return errUnusableKey("belongs to a user account that no longer exists")
	case billing.RefusedDisabled:
		return errUnusableKey("belongs to a disabled user account")
	case billing.RefusedModel:
		return &APIError{Status: 403, Type: "permission_error", Code: "model_not_allowed", Param: "model",
			Message: "Your account is not allowed to use the model `" + clip(c.model) + "`."}
	case billing.RefusedUnpriced:
		return errModelNotPriced(c.model)
	case billing.RefusedRPM:
		return &APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: r.RetryAfter,
			Message: "Rate limit reached for your account: " + strconv.FormatInt(r.Limit, 10) + " requests per minute. Please try again later."}
	case billing.RefusedConcurrency:
		return &APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded",
			Message: "Your account has " + strconv.FormatInt(r.Limit, 10) + " requests in flight, its limit. Please try again when one ends."}
	case billing.RefusedBalance:
		if c.endpoint == translate.Messages {
			return &APIError{Status: 402, Type: "billing_error", Code: "insufficient_quota",
				Message: "Your credit balance is too low for this request. Ask your Troupe operator to top up your account."}
		}
		return &APIError{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota",
			Message: "You exceeded your current quota: your balance cannot cover this request. Ask your Troupe operator to top up your account."}
	}
	if ok, held := s.logs.billing.Take(context.Background(), s.log, slog.LevelWarn); ok {
		s.log.Warn("billing: balance unavailable; user request refused", "err", r.Err, "suppressed", held)
	}
	return &APIError{Status: 503, Type: "server_error", Code: "billing_unavailable",
		Message: "The gateway cannot read your balance right now. Please try again shortly."}
}

// errModelNotPriced refuses a user's request for a model without a price
// (403 model_not_priced), on the billed routes and on count_tokens alike.
// Its own code: the allowlist's model_not_allowed tells the user the model
// is not theirs; this one is the operator's to mend.
func errModelNotPriced(model string) *APIError {
	model = clip(model)
	return &APIError{Status: 403, Type: "permission_error", Code: "model_not_priced", Param: "model",
		Message: "The model `" + model + "` has no price set, so user accounts cannot use it yet. " +
			"Ask your Troupe operator to set one (troupe prices set " + model + " --input … --output …; a price just set takes effect within 30 s), or use a model GET /v1/models lists."}
}
