package gateway

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// TraceHeader is the request header with which an admin API key asks for the
// routing decision of its request ("1"); the answer then carries it in
// DecisionHeader. Other keys' requests ignore it.
const (
	TraceHeader    = "X-Troupe-Trace"
	DecisionHeader = "X-Troupe-Decision"
)

// wantsTrace reports whether the request asks for its decision trace and may see it.
func wantsTrace(ctx *fasthttp.RequestCtx, c *call) bool {
	if !c.key.Admin {
		return false
	}
	v := ctx.Request.Header.Peek(TraceHeader)
	return len(v) == 1 && v[0] == '1'
}

// traceHeader sets DecisionHeader when the request asked for it and an account was chosen.
func (s *Server) traceHeader(ctx *fasthttp.RequestCtx, c *call) {
	if c.trace && c.decision != nil {
		ctx.Response.Header.SetBytesV(DecisionHeader, appendDecision(nil, c))
	}
}

// appendDecision appends the compact trace of c's routing decision: space
// separated key=value fields, in this order (optional ones only when they
// apply), for example
//
//		policy=smart@3 via=score candidates=120 skipped=2 filters=provider:openai,tags:fast,sticky top=acct-1:98.5:healthy,acct-2:97:warm chosen=acct-1 attempt=2
//
//	  - policy: the policy that chose, NAME@VERSION; canary=1 follows when its canary chose
//	  - via: score (best by tier and score, with top-k jitter), sticky (the
//	    sticky key's account), prefer (the account holding previous_response_id)
//	  - candidates: available accounts in the request's candidate sets
//	  - skipped: candidates walked past by exclusions (accounts already tried)
//	    and route() filters
//	  - filters: what route() (or the key) narrowed: group, provider, tags (joined by |), sticky
//	  - top: the best candidates considered, NAME:SCORE:TIER, best first (at most 3)
//	  - chosen: the account that served
//	  - attempt: the serving attempt's number when failover happened
//	  - refusals: grants accounts refused (stale views) before this one
//	  - waited_ms: time parked waiting for capacity
//
// Names are the accounts' names with bytes outside printable ASCII, spaces
// and the separators ",:=|" replaced by '_'. The format is in docs/policies.md#decision-traces.
func appendDecision(dst []byte, c *call) []byte {
	d := c.decision
	dst = append(dst, "policy="...)
	dst = appendToken(dst, d.Policy)
	dst = append(dst, '@')
	dst = strconv.AppendUint(dst, d.PolicyVersion, 10)
	if d.Canary {
		dst = append(dst, " canary=1"...)
	}
	dst = append(dst, " via="...)
	dst = append(dst, d.Via.String()...)
	dst = append(dst, " candidates="...)
	dst = strconv.AppendInt(dst, int64(d.Candidates), 10)
	if d.Skipped > 0 {
		dst = append(dst, " skipped="...)
		dst = strconv.AppendInt(dst, int64(d.Skipped), 10)
	}
	if c.group != "" || c.provider != "" || len(c.tags) > 0 || c.sticky != "" {
		dst = append(dst, " filters="...)
		n := len(dst)
		sep := func() {
			if len(dst) > n {
				dst = append(dst, ',')
			}
		}
		if c.group != "" {
			dst = append(dst, "group:"...)
			dst = appendToken(dst, c.group)
		}
		if c.provider != "" {
			sep()
			dst = append(dst, "provider:"...)
			dst = appendToken(dst, string(c.provider))
		}
		if len(c.tags) > 0 {
			sep()
			dst = append(dst, "tags:"...)
			for i, t := range c.tags {
				if i > 0 {
					dst = append(dst, '|')
				}
				dst = appendToken(dst, t)
			}
		}
		if c.sticky != "" {
			sep()
			dst = append(dst, "sticky"...)
		}
	}
	dst = append(dst, " top="...)
	for i := range d.NTop {
		if i > 0 {
			dst = append(dst, ',')
		}
		r := &d.Top[i]
		dst = appendToken(dst, r.Name)
		dst = append(dst, ':')
		dst = strconv.AppendFloat(dst, r.Score, 'g', 6, 64)
		dst = append(dst, ':')
		dst = append(dst, r.Tier.String()...)
	}
	dst = append(dst, " chosen="...)
	dst = appendToken(dst, d.ChosenAccount().Name)
	if c.attempts > 1 {
		dst = append(dst, " attempt="...)
		dst = strconv.AppendInt(dst, int64(c.attempts), 10)
	}
	if d.Refusals > 0 {
		dst = append(dst, " refusals="...)
		dst = strconv.AppendInt(dst, int64(d.Refusals), 10)
	}
	if d.Waited > 0 {
		dst = append(dst, " waited_ms="...)
		dst = strconv.AppendInt(dst, d.Waited.Milliseconds(), 10)
	}
	return dst
}

// appendToken appends s with bytes that would break the format replaced by '_'.
func appendToken(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, '-')
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b <= ' ' || b > '~' || b == ',' || b == ':' || b == '=' || b == '|' {
			b = '_'
		}
		dst = append(dst, b)
	}
	return dst
}

// decisionText returns c's decision trace for the request log ("" when no account was chosen).
func decisionText(c *call) string {
	if c.decision == nil {
		return ""
	}
	var buf [256]byte
	return string(appendDecision(buf[:0], c))
}
