package gateway

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Limit windows. Counters live in the cache (Redis in production), so limits
// are exact across instances; with the in-memory cache they are per process.
const (
	minute = time.Minute
	day    = 24 * time.Hour
)

func errRateLimited(what string, limit int64, retry time.Duration) *APIError {
	return &APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: retry,
		Message: "Rate limit reached for this API key: " + strconv.FormatInt(limit, 10) + " " + what + ". Please try again later."}
}

// untilWindowEnd is the time left in the epoch-aligned window of length w.
func untilWindowEnd(now time.Time, w time.Duration) time.Duration {
	return w - time.Duration(now.UnixNano()%int64(w))
}

// admit charges one request against the key's RPM and RPD windows and checks
// its daily token budget. A cache failure lets the request through (limits
// are a guard, not a dependency) and is logged.
func (s *Server) admit(ctx context.Context, k *storage.APIKey) *APIError {
	l := k.Limits
	if s.cache == nil || (l.RPM <= 0 && l.RPD <= 0 && l.TokensPerDay <= 0) {
		return nil
	}
	now := s.now()
	check := func(name string, limit int64, w time.Duration, what string) *APIError {
		if limit <= 0 {
			return nil
		}
		n, err := s.cache.Incr(ctx, "rl:"+name+":"+k.ID, 1, w)
		if err != nil {
			s.limitError(err)
			return nil
		}
		if n > limit {
			return errRateLimited(what, limit, untilWindowEnd(now, w))
		}
		return nil
	}
	if e := check("rpm", l.RPM, minute, "requests per minute"); e != nil {
		return e
	}
	if e := check("rpd", l.RPD, day, "requests per day"); e != nil {
		return e
	}
	if l.TokensPerDay > 0 {
		n, err := s.cache.Count(ctx, "rl:tpd:"+k.ID, day)
		if err != nil {
			s.limitError(err)
			return nil
		}
		if n >= l.TokensPerDay {
			return &APIError{Status: 429, Type: "tokens", Code: "rate_limit_exceeded", RetryAfter: untilWindowEnd(now, day),
				Message: "This API key has used its daily token budget (" + strconv.FormatInt(l.TokensPerDay, 10) + " tokens). It resets at 00:00 UTC."}
		}
	}
	return nil
}

// chargeTokens adds a served request's tokens to the key's daily budget.
func (s *Server) chargeTokens(k *storage.APIKey, tokens int64) {
	if s.cache == nil || k.Limits.TokensPerDay <= 0 || tokens <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := s.cache.Incr(ctx, "rl:tpd:"+k.ID, tokens, day); err != nil {
		s.limitError(err)
	}
}

func (s *Server) limitError(err error) {
	if errors.Is(err, storage.ErrCacheUnavailable) {
		s.log.Debug("rate limit counter unavailable; request admitted", "err", err)
		return
	}
	s.log.Warn("rate limit counter", "err", err)
}
