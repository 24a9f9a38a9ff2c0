package gateway

import (
	"context"
	"time"
)

// AffinityTTL is how long the gateway remembers which account served a
// Responses answer, so a follow-up naming it in previous_response_id goes to
// the account that holds its state.
const AffinityTTL = 6 * time.Hour

const affinityPrefix = "aff:resp:"

// remember records that account served response id (best effort: a cache
// failure only costs the follow-up its preference).
func (s *Server) remember(id, account string) {
	if s.cache == nil || id == "" || len(id) > 256 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.cache.Set(ctx, affinityPrefix+id, account, AffinityTTL); err != nil {
		s.log.Debug("affinity not recorded", "err", err)
	}
}

// affinity returns the account that served previous response id, or "".
// The scheduler prefers it while it is available; otherwise the request is
// routed normally (the upstream then answers whether it knows the id).
func (s *Server) affinity(ctx context.Context, id string) string {
	if s.cache == nil || id == "" || len(id) > 256 {
		return ""
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	acc, ok, err := s.cache.Get(actx, affinityPrefix+id)
	if err != nil || !ok {
		return ""
	}
	return acc
}
