package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/stats"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// failure is an upstream attempt that did not produce an answer for the client.
type failure struct {
	verdict upstream.Verdict
	status  int                // upstream status (0: no HTTP answer)
	header  http.Header        // upstream headers, when there was an answer
	body    []byte             // upstream error body (bounded), when there was one
	msg     string             // error message from an error event, when the stream carried one
	err     error              // transport error, when there was no answer
	up      translate.Protocol // the protocol the upstream spoke (0: none was chosen)
	answer  *APIError          // the gateway's own answer for this failure, when it has one
}

// result is one successful attempt: a non-stream answer, or a stream held
// up to its first content event and not yet written to the client.
type result struct {
	status int
	header http.Header
	body   []byte  // non-stream answer
	stream *stream // held stream
	lease  *actors.Lease
	// buf is the pooled buffer body was read into (answerBufs), given back
	// by free once the body is copied into the client's response; nil when
	// none. A result dropped without free only loses the buffer's reuse.
	buf *[]byte
}

// answerBufs holds the buffers non-stream answers are read into
// (readAnswer): the body is copied into the client's response
// (commitBody), so each buffer serves request after request instead of
// one allocation (and its growth) per answer.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledAnswer is the largest buffer put back into answerBufs: a rare
// large answer's buffer is left to the GC rather than held by the pool.
const maxPooledAnswer = 1 << 20

// free gives r's pooled buffer back. r.body must not be used afterwards.
func (r *result) free() {
	if r.buf != nil && cap(*r.buf) <= maxPooledAnswer {
		answerBufs.Put(r.buf)
	}
	r.buf, r.body = nil, nil
}

// readPooled reads rd to its end, as io.ReadAll does, but at most limit
// bytes (as through io.LimitReader, which cost an allocation a request),
// into a buffer from answerBufs; the caller gives it back (result.free)
// when done with it.
func readPooled(body io.Reader, limit int64) (*[]byte, error) {
	lr := io.LimitedReader{R: body, N: limit}
	rd := &lr
	p := answerBufs.Get().(*[]byte)
	b := (*p)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow, as io.ReadAll does
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			*p = b
			if err == io.EOF {
				err = nil
			}
			return p, err
		}
	}
}

// outcome is what the failover loop ends with: exactly one field is set.
type outcome struct {
	res  result    // success
	fail *failure  // every attempt failed; the last failure
	aerr *APIError // no attempt could start
	// wake: not the loop's outcome but the request timer's wake-up of a
	// streamed request's handler (outcomes.beat).
	wake bool
}

// run is the failover loop: acquire a lease, attempt, and on an account-level
// failure before anything reached the client, exclude the account and try the
// next one — up to MaxAttempts and, after the first attempt, within
// FailoverBudget. It releases every lease it does not return.
func (s *Server) run(ctx context.Context, c *call) outcome {
	var tried []string
	var last *failure
	maxAttempts := s.cfg.MaxAttempts
	if c.maxAttempts > 0 {
		maxAttempts = min(c.maxAttempts, 20)
	}
	var budgetEnd time.Time // set when the first attempt ends
	// retryOn: the next attempt is the one retry without account-bound
	// state, after retryOn refused it (stateRetry), outside the attempt
	// count and the budget.
	retryOn := ""
	// authWait: the request already went back once to a codex account
	// that answered 401 and refreshes its tokens (see authRetry); authNext:
	// the next attempt is that one, which a request bound to its account
	// (c.only) takes too.
	authWait, authNext := false, false
	for c.attempts < maxAttempts || retryOn != "" {
		if retryOn == "" && c.attempts > 0 && s.now().After(budgetEnd) {
			break // the first attempt is never cut short; failovers share the budget after it
		}
		if retryOn == "" && c.attempts > 0 && c.only != "" && !authNext {
			break // only the owner of previous_response_id holds its state
		}
		authNext = false
		prefer := c.prefer
		if retryOn != "" {
			prefer, retryOn = retryOn, ""
		}
		var began time.Time // when this attempt began asking for a lease (traced requests)
		if c.tr != nil {
			began = s.now()
		}
		lease, err := s.sys.Acquire(ctx, actors.AcquireRequest{
			Endpoint: c.endpoint, Native: c.native, Model: c.target, Group: c.group, Exclude: tried, MaxWait: s.cfg.MaxWait,
			Provider: c.provider, Tags: c.tags, StickyKey: c.sticky, KeyID: c.key.ID, Weight: c.key.Weight, Prefer: prefer,
			Only: c.only, Canary: c.canary, Wait: waitCheck{s},
		})
		if err != nil {
			if last != nil {
				break // accounts ran out during failover: answer with what the last one said
			}
			if ctx.Err() != nil {
				return outcome{fail: &failure{verdict: upstream.Verdict{Class: upstream.ClassCanceled}, err: ctx.Err()}}
			}
			return outcome{aerr: s.acquireError(c, err)}
		}
		c.attempts++
		lease.RequestID = c.id // for the account's log lines
		tried = append(tried, lease.AccountID)
		if c.tr != nil {
			s.traceAttempt(c, lease, began)
		}
		astart := s.now()
		res, f := s.attempt(ctx, c, lease)
		if f != nil {
			c.failed(lease.AccountID, f, s.now(), astart)
		}
		if c.attempts == 1 {
			budgetEnd = s.now().Add(s.cfg.FailoverBudget)
		}
		if f == nil {
			s.metrics.failovers.Observe(float64(c.attempts - 1))
			s.failovers.add(c.attempts - 1)
			s.sys.RecordErrors(c.errors)
			return outcome{res: res}
		}
		last = f
		if s.stateRetry(c, f) && ctx.Err() == nil {
			// The account could not read state another account made: the
			// request goes once more without it, to the same account (it
			// is not at fault), and the 400 never reaches the client.
			s.log.Info("upstream refused account-bound state; retrying without it", "request_id", c.id, "account", lease.Name)
			tried, retryOn = tried[:len(tried)-1], lease.AccountID
			continue
		}
		failover := f.verdict.Class.AccountFault() && ctx.Err() == nil
		s.logAttempt(c, lease, f, failover && c.attempts < maxAttempts)
		if !failover {
			break
		}
		if !authWait && authRetry(lease, f) {
			// A codex account's 401 starts a token refresh of a few hundred
			// ms (actors/refresh.go) and rests the account until it ends:
			// the account is not excluded, so when no other account can take
			// the request it waits for the refresh (up to MaxWait, within the
			// request's timeout) instead of failing with a 503. Once only: a
			// 401 on the refreshed tokens makes the account unauthorized. A
			// request bound to that account by previous_response_id gets
			// this retry too, on the same account (the only one it may use).
			authWait, authNext, tried = true, true, tried[:len(tried)-1]
		}
	}
	s.metrics.failovers.Observe(float64(max(c.attempts-1, 0)))
	s.failovers.add(c.attempts - 1)
	s.sys.RecordErrors(c.errors)
	return outcome{fail: last} // the request's end is logged with its status (Server.logEnd)
}

// authRetry reports whether the request whose attempt on lease failed
// with f may go back to that account after its token refresh: a 401 on a
// codex account (the only provider whose account refreshes its
// credentials). An account that cannot refresh becomes unauthorized, so
// the next acquire finds it gone and the request ends as before.
func authRetry(lease *actors.Lease, f *failure) bool {
	return f.verdict.Class == upstream.ClassAuth && lease.Provider == storage.ProviderCodex
}

// attempt sends c through lease, in the upstream protocol of the lease's
// provider (upstreamEndpoint): the client's body as it is when the protocols
// match, else translated. On failure the lease is released here; on success
// a non-stream lease is released here and a stream's lease is released by
// the stream's close.
func (s *Server) attempt(ctx context.Context, c *call, lease *actors.Lease) (result, *failure) {
	start := s.now()
	c.decision = &lease.Decision
	up := upstreamEndpoint(lease.Provider, c.endpoint)
	body, usage, f := s.upstreamBody(c, up, lease.Provider == storage.ProviderOpenAI || lease.Provider == storage.ProviderOpenAICompat)
	if f == nil && (c.stripState || s.foreignState(c, lease)) {
		body, f = s.statelessBody(c, up, body, usage)
	}
	if f != nil {
		// The client's request cannot be said in this upstream's protocol:
		// the client's fault, so no penalty for the account.
		s.release(c, lease, 0, f.verdict, start, 0)
		return result{}, f
	}
	actx, acancel := s.attemptContext(ctx, c)
	// usage: the gateway asked for the usage chunk the client did not; the
	// relay drops it (a translated stream consumes its own).
	dropUsage := usage
	resp, frames, err := s.send(actx, c, lease, up, body) // HTTP, or the upstream WebSocket (gateway/upstream_ws.go)
	if err != nil {
		acancel.end()
		v := upstream.ClassifyError(err)
		if v.Class == upstream.ClassCanceled && ctx.Err() == nil {
			v.Class = upstream.ClassTransient // our attempt deadline, not the client, ended it
		}
		s.release(c, lease, 0, v, start, 0)
		return result{}, &failure{verdict: v, err: err, up: up}
	}
	if frames != nil { // only streams go over the upstream WebSocket
		return s.holdStream(s.newStreamFrom(c, up, lease, 200, frames, frames, start, acancel), false)
	}
	if resp.Status < 200 || resp.Status > 299 {
		return result{}, s.refused(c, lease, up, resp, start, acancel)
	}
	if c.stream {
		if !isEventStream(resp.Header) {
			// JSON where a stream was asked: the transport should have said so;
			// treat it as the upstream's fault, another account may stream.
			resp.Body.Close()
			acancel.end()
			v := upstream.Verdict{Class: upstream.ClassTransient}
			s.release(c, lease, resp.Status, v, start, 0)
			return result{}, &failure{verdict: v, err: upstream.ErrWrongContentType, up: up}
		}
		return s.holdStream(s.newStream(c, up, lease, resp, start, acancel), dropUsage)
	}
	defer acancel.end()
	return s.readAnswer(ctx, c, lease, up, resp, start)
}

// attemptEnd ends an attempt's context: a (a child of the request's
// reqCtx) or, when a is nil, cancel (a context of package context's).
type attemptEnd struct {
	a      *attemptCtx
	cancel context.CancelFunc
}

// end ends the attempt's context.
func (e attemptEnd) end() {
	if e.a != nil {
		e.a.cancel()
		return
	}
	e.cancel()
}

// fn is end as a function, for what keeps it (a stream).
func (e attemptEnd) fn() context.CancelFunc {
	if e.a != nil {
		return e.a.cancel
	}
	return e.cancel
}

// attemptContext starts the context of c's next attempt under the
// request's context ctx: a stream's has no deadline of its own (hold
// enforces the first-token timeout), a non-stream one's ends after
// NonStreamTimeout. Under an HTTP request's reqCtx it is an attemptCtx (the
// first one embedded in c) on the request's timer; under another context
// (a Responses WebSocket session's turn) it is package context's.
func (s *Server) attemptContext(ctx context.Context, c *call) (context.Context, attemptEnd) {
	d := s.cfg.NonStreamTimeout
	if c.stream {
		d = 0
	}
	if rc, ok := ctx.(*reqCtx); ok {
		a := &c.actx
		if a.rc != nil { // a failover: the first attempt's is taken
			a = new(attemptCtx)
		}
		rc.startAttempt(a, d)
		return a, attemptEnd{a: a}
	}
	if d == 0 {
		actx, cancel := context.WithCancel(ctx)
		return actx, attemptEnd{cancel: cancel}
	}
	actx, cancel := context.WithTimeout(ctx, d)
	return actx, attemptEnd{cancel: cancel}
}

// refused is the failure of c's attempt the upstream answered with a status
// other than 2xx: its body (at most maxErrorBody) read, the attempt's
// context ended (cancel), the body classified and the lease released with
// the verdict.
func (s *Server) refused(c *call, lease *actors.Lease, up translate.Protocol, resp *upstream.Response, start time.Time, cancel attemptEnd) *failure {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	cancel.end()
	v := upstream.Classify(resp.Status, resp.Header, body)
	s.release(c, lease, resp.Status, v, start, 0)
	return &failure{verdict: v, status: resp.Status, header: resp.Header, body: body, up: up}
}

// readAnswer reads a non-stream 2xx answer of protocol up whole (at most
// maxResponseBody), checks that it is JSON and no error in a 2xx's
// clothing, releases the lease with the outcome, notes and settles what
// was served (settle) and returns the answer in the client's protocol.
func (s *Server) readAnswer(ctx context.Context, c *call, lease *actors.Lease, up translate.Protocol, resp *upstream.Response, start time.Time) (result, *failure) {
	buf, err := readPooled(resp.Body, maxResponseBody+1)
	resp.Body.Close()
	body := *buf
	// Every failure below returns no body, so the buffer goes back at once.
	pooled := result{buf: buf}
	if err == nil && len(body) > maxResponseBody {
		err = errors.New("upstream answer larger than 64 MiB")
	}
	if err == nil && !translate.ValidWithin(body, maxJSONDepth) {
		err = upstream.ErrWrongContentType
	}
	if err != nil {
		v := upstream.ClassifyError(err)
		if v.Class == upstream.ClassNone || (v.Class == upstream.ClassCanceled && ctx.Err() == nil) {
			v.Class = upstream.ClassTransient
		}
		s.release(c, lease, resp.Status, v, start, 0)
		pooled.free()
		return result{}, &failure{verdict: v, err: err, up: up}
	}
	ans := upstream.ReadAnswer(up, body) // its error, usage and id in one pass
	if ans.IsError {
		s.release(c, lease, resp.Status, ans.Verdict, start, 0)
		pooled.free()
		return result{}, &failure{verdict: ans.Verdict, msg: ans.Msg, up: up, err: errors.New("error body with a 2xx status")}
	}
	u := ans.Usage
	now := s.now()
	lat := now.Sub(start)
	tk := statsTokens(u)
	s.releaseAt(c, lease, resp.Status, upstream.Verdict{}, start, lat, now, &tk) // a whole answer's first byte is its last
	s.noteServed(c, lease, u, lat, 0)
	if c.tr != nil {
		c.tr.traceAnswer(up, body)
	}
	respID := ""
	if up != c.endpoint {
		out, err := translateAnswer(c, up, body)
		if err != nil {
			s.log.Warn("answer translation failed", "request_id", c.id, "from", up.Route(), "to", c.endpoint.Route(), "err", err)
			s.settle(c, lease.AccountID, "", false) // the tokens were served all the same
			pooled.free()
			return result{}, &failure{verdict: upstream.Verdict{Class: upstream.ClassRequest}, up: up, err: err,
				answer: errUpstream("The upstream answer could not be translated into this protocol.")}
		}
		body = out
	} else if c.endpoint == translate.Responses && !c.compact {
		respID = ans.ResponseID()
	}
	s.settle(c, lease.AccountID, respID, true)
	if c.tr != nil && s.tracing.ContentBytes > 0 {
		c.tr.traceSent(body, s.tracing.ContentBytes)
	}
	return result{status: resp.Status, header: resp.Header, body: body, lease: lease, buf: buf}, nil
}

// holdStream holds st until its first content (stream.hold): the result to
// commit, or the failure to fail over from (the lease then released).
// dropUsage: the gateway asked for the usage chunk the client did not.
func (s *Server) holdStream(st *stream, dropUsage bool) (result, *failure) {
	st.dropUsage = dropUsage
	if f := st.hold(); f != nil {
		return result{}, f
	}
	return result{status: st.status, stream: st, lease: st.lease}, nil
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}

// release returns the lease with the attempt's outcome, counts the attempt
// and ends its span. c is the request the attempt served (nil for calls
// that are not traced: count_tokens).
func (s *Server) release(c *call, l *actors.Lease, status int, v upstream.Verdict, start time.Time, ttft time.Duration) {
	s.releaseAt(c, l, status, v, start, ttft, s.now(), nil)
}

// releaseAt is release at now (the attempt's end), counting with the
// attempt the tokens it served when tk is not nil: the attempt statistics
// then take their locks once for both (stats.Store.RecordServed), where
// release and then served took them twice.
func (s *Server) releaseAt(c *call, l *actors.Lease, status int, v upstream.Verdict, start time.Time, ttft time.Duration, now time.Time, tk *stats.Tokens) {
	s.metrics.attempt(l.Provider, v.Class)
	s.classes.add(now, v.Class)
	lat := now.Sub(start)
	a := stats.Attempt{Status: status, Class: v.Class, Latency: lat, TTFT: ttft}
	if tk != nil {
		s.stats.RecordServed(now, l.AccountID, string(l.Provider), a, *tk)
	} else {
		s.stats.Record(now, l.AccountID, string(l.Provider), a)
	}
	s.sys.Release(l, actors.Outcome{RequestID: l.RequestID, Status: status, Verdict: v, Latency: lat, TTFT: ttft})
	if c != nil && c.tr != nil {
		c.tr.traceRelease(status, v, ttft, now)
	}
}

// served notes on c the attempt that served the client (account, tokens,
// latency, TTFT) and counts its tokens in the attempt statistics; settle
// then charges them to the key. Only that attempt is billed; its
// request-log record is written when the request ends (Server.logRequest),
// with the status the client got. An attempt whose release counted its
// tokens (releaseAt) is noted with noteServed instead.
func (s *Server) served(c *call, l *actors.Lease, u translate.Usage, latency, ttft time.Duration) {
	s.noteServed(c, l, u, latency, ttft)
	s.stats.AddTokens(s.now(), l.AccountID, string(l.Provider), statsTokens(u))
}

// noteServed is served without counting the tokens.
func (s *Server) noteServed(c *call, l *actors.Lease, u translate.Usage, latency, ttft time.Duration) {
	c.servedBy, c.usage, c.latency, c.ttft = l.AccountID, u, latency, ttft
}

// statsTokens is u as the attempt statistics count it.
func statsTokens(u translate.Usage) stats.Tokens {
	return stats.Tokens{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CachedTokens, CacheWrite: u.CacheWriteTokens}
}

// logRequest queues the one request-log record (storage.UsageRecord) of an
// authenticated client request that ended with status: the account that
// served it, else the one whose attempt failed last ("" when no attempt
// started); the tokens served (zero when nothing was); the failure class
// when status >= 400 (499: the client closed the connection, "canceled");
// and the decision trace of the last attempt. Requests refused before
// authentication (401) leave no record, so anonymous traffic cannot flood
// the log (docs/admin-api.md#request-log).
func (s *Server) logRequest(c *call, status int) {
	if !c.authed {
		return
	}
	account, latency, class := c.servedBy, c.latency, ""
	if account == "" && len(c.errors) > 0 {
		account = c.errors[len(c.errors)-1].AccountID
	}
	if c.servedBy == "" {
		latency = s.now().Sub(c.start)
	}
	switch {
	case status == statusClientClosed:
		class = upstream.ClassCanceled.String()
	case status >= 400 && c.brokeClass != upstream.ClassNone:
		// The serving attempt's stream failed after commit: the last
		// failed attempt, though not among c.errors (it served the client).
		class = c.brokeClass.String()
	case status >= 400 && len(c.errors) > 0:
		class = c.errors[len(c.errors)-1].Class
	}
	rec := storage.UsageRecord{
		RequestID: c.id, At: c.start.UTC(), KeyID: c.key.ID, AccountID: account,
		Model: c.model, Route: c.route(), Stream: c.stream, Status: status, ErrorClass: class, Attempts: c.attempts,
		Latency: latency, TTFT: c.ttft,
		InputTokens: c.usage.InputTokens, CachedTokens: c.usage.CachedTokens, OutputTokens: c.usage.OutputTokens, ReasoningTokens: c.usage.ReasoningTokens,
		CacheWriteTokens: c.usage.CacheWriteTokens, Decision: decisionText(c), Estimated: c.estimated,
		UserID: c.key.UserID, // refused requests too: the user's request log shows them
	}
	if c.ticket != nil { // a user's request: priced from this record's numbers, charged when it is stored
		s.billing.Finish(c.ticket, &rec)
		c.ticket = nil
	}
	s.sys.Record(rec)
}

// failed adds the attempt that just failed on account to c's error events.
func (c *call) failed(account string, f *failure, end, start time.Time) {
	c.errors = append(c.errors, storage.ErrorEvent{
		RequestID: c.id, Attempt: c.attempts, At: end.UTC(), AccountID: account,
		Class: f.verdict.Class.String(), Status: f.status, Latency: end.Sub(start),
	})
}
