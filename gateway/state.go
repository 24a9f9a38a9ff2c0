package gateway

import (
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// Account-bound state (docs/affinity.md#account-bound-state): encrypted
// reasoning, thinking signatures and the like in a client's history can be
// read only by the upstream account that made them. The request goes to
// that account when the gateway knows it (previous_response_id's owner
// serves it alone; the session's last account is preferred); an attempt on
// any other account — routed elsewhere, or a failover — goes without that
// state (translate.StripAccountState), the conversation's messages kept in
// order. An upstream that still refuses such state (400
// invalid_encrypted_content) is answered by one retry without it.

// foreignState reports whether lease's account must not get c's
// account-bound state: it is not the known owner, or, when the owner is
// unknown, the attempt is a failover (the first attempt went where routing
// put the conversation, and the state may be its own).
func (s *Server) foreignState(c *call, lease *actors.Lease) bool {
	if c.owner != "" {
		return lease.AccountID != c.owner
	}
	return c.attempts > 1
}

// statelessBody returns body, c's body in protocol up (the usage variant
// when usage), without account-bound state; made once per variant and kept
// for later attempts. A body that cannot be read is the client's 400.
func (s *Server) statelessBody(c *call, up translate.Protocol, body []byte, usage bool) ([]byte, *failure) {
	slot := int(up)
	if usage || slot >= len(c.stateless)-1 {
		slot = len(c.stateless) - 1
	}
	if b := c.stateless[slot]; b != nil {
		return b, nil
	}
	b, stripped, err := translate.StripAccountState(up, body)
	if err != nil {
		return nil, &failure{verdict: upstream.Verdict{Class: upstream.ClassRequest}, up: up, err: err, answer: translateRequestError(err)}
	}
	if stripped {
		s.metrics.stateStripped.Inc()
		s.log.Debug("account-bound state left out", "request_id", c.id, "attempt", c.attempts)
	}
	c.stateless[slot] = b
	return b, nil
}

// stateRetry reports whether failure f is an upstream refusing account-bound
// state that c's next attempt should leave out (upstream.Verdict.StateRefused),
// the first time only: it sets c.stripState.
func (s *Server) stateRetry(c *call, f *failure) bool {
	if !f.verdict.StateRefused || c.stripState {
		return false
	}
	c.stripState = true
	s.metrics.stateRetries.Inc()
	return true
}
