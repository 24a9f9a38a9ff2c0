package actors

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Forecast tuning.
const (
	// minBurnSpan is the shortest time between two reports that a burn rate
	// is measured over.
	minBurnSpan = 30 * time.Second
	// resetSlack is how far a window's reset time may move between reports
	// (reset-after-seconds is rounded) before it counts as a new window.
	resetSlack = time.Minute
	// sniffLimit is how much of a codex stream is scanned for a
	// codex.rate_limits event, which comes first when it comes.
	sniffLimit = 64 << 10
)

// windowState is what the actor remembers of one window beyond its view:
// the first report of the current window, for the burn rate.
type windowState struct {
	firstUsed float64
	firstAt   time.Time
	resetsAt  time.Time
}

// limitsTransport reports the usage windows of every codex answer to the
// account actor: the x-codex-* headers (any status, 429 included) and a
// codex.rate_limits event near the start of a stream.
type limitsTransport struct {
	upstream.Transport
	report func(l upstream.RateLimits, at time.Time, model string)
}

// requestModel is the model req asks for ("" when its body names none).
func requestModel(req *upstream.Request) string {
	return gjson.GetBytes(req.Body, "model").Str
}

// Do implements upstream.Transport.
func (t *limitsTransport) Do(ctx context.Context, req *upstream.Request) (*upstream.Response, error) {
	resp, err := t.Transport.Do(ctx, req)
	if err != nil {
		return resp, err
	}
	now := time.Now()
	model := requestModel(req)
	if l, ok := upstream.ParseRateLimitHeaders(resp.Header, now); ok {
		t.report(l, now, model)
	}
	if req.Stream && resp.Status >= 200 && resp.Status < 300 {
		resp.Body = &sniffBody{ReadCloser: resp.Body, report: func(l upstream.RateLimits, at time.Time) { t.report(l, at, model) }}
	}
	return resp, nil
}

// sniffBody looks for a codex.rate_limits event in the first sniffLimit
// bytes of a stream, without changing a byte of it.
type sniffBody struct {
	io.ReadCloser
	report func(upstream.RateLimits, time.Time)
	seen   int
	carry  []byte // an incomplete line that mentioned the event
}

var rateLimitsTag = []byte(`"codex.rate_limits"`)

func (b *sniffBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.seen < sniffLimit && n > 0 {
		b.seen += n
		b.scan(p[:n])
	}
	return n, err
}

func (b *sniffBody) scan(chunk []byte) {
	buf := chunk
	if len(b.carry) > 0 {
		b.carry = append(b.carry, chunk...)
		buf = b.carry
	}
	for {
		nl := bytes.IndexByte(buf, '\n')
		if nl < 0 {
			break
		}
		if line := buf[:nl]; bytes.Contains(line, rateLimitsTag) {
			if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
				now := time.Now()
				if l, ok := upstream.ParseRateLimitsEvent(bytes.TrimSpace(data), now); ok {
					b.report(l, now)
				}
			}
		}
		buf = buf[nl+1:]
	}
	// Keep the unfinished line for the next read (bounded by sniffLimit).
	b.carry = append(b.carry[:0], buf...)
	if b.seen >= sniffLimit {
		b.carry = nil
	}
}

// setTransport installs tr as the account's transport, wrapped for
// rate-limit reports when the account is a codex one.
func (a *account) setTransport(tr upstream.Transport) {
	a.cfg.transport = tr // what a restart starts with
	if tr == nil || a.cfg.account.Provider != storage.ProviderCodex {
		a.transport = tr
		return
	}
	pid, eng := a.pid(), a.eng()
	lt := &limitsTransport{Transport: tr, report: func(l upstream.RateLimits, at time.Time, model string) {
		eng.Send(pid, &accountRateLimits{limits: l, at: at, model: model})
	}}
	if d, ok := tr.(upstream.WebSocketDialer); ok {
		a.transport = &limitsWSTransport{limitsTransport: lt, WebSocketDialer: d}
		return
	}
	a.transport = lt
}

// limitsWSTransport is a limitsTransport that keeps the WebSocket
// capability of the transport it wraps (found by type assertion).
type limitsWSTransport struct {
	*limitsTransport
	upstream.WebSocketDialer
}

// rateLimits folds an upstream usage report, of an answer to a request
// for model, into the view: the account's own windows with burn rate and
// forecast, the plan, the active limit, credits and the per-model limit
// families (families.go); a quota cooldown when one of the account's own
// windows is used up (or the backend says its limit is reached), and the
// early end of such a cooldown when the report shows the window has reset.
// A family that runs out rests on its own (View.ModelCooling): the account
// goes on serving other models.
func (a *account) rateLimits(l upstream.RateLimits, at time.Time, model string) {
	if l.Plan != "" {
		a.edit().Plan = l.Plan
	}
	if l.ActiveLimit != "" {
		a.edit().ActiveLimit = l.ActiveLimit
	}
	if l.Credits != nil {
		c := *l.Credits
		a.edit().Credits = &c
	}
	ownReached := a.families(l, at, model)
	if a.windows == nil {
		a.windows = make(map[string]*windowState)
	}
	ws := make([]UsageWindow, 0, len(l.Windows))
	var exhaustedUntil time.Time
	exhausted, reset := false, false
	for _, w := range l.Windows {
		st := a.windows[w.Name]
		newWindow := st == nil || w.UsedPercent < st.firstUsed ||
			absDur(w.ResetsAt.Sub(st.resetsAt)) > resetSlack
		if st != nil && newWindow && !st.resetsAt.IsZero() && w.ResetsAt.After(st.resetsAt.Add(resetSlack)) && !w.Exhausted() {
			reset = true // the upstream started a new window
		}
		if newWindow {
			st = &windowState{firstUsed: w.UsedPercent, firstAt: at, resetsAt: w.ResetsAt}
			a.windows[w.Name] = st
		}
		uw := UsageWindow{Name: w.Name, UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes, ResetsAt: w.ResetsAt}
		if span := at.Sub(st.firstAt); span >= minBurnSpan && w.UsedPercent > st.firstUsed {
			uw.BurnRate = (w.UsedPercent - st.firstUsed) / span.Hours()
		}
		switch {
		case w.Exhausted():
			uw.ExhaustsAt = at
			exhausted = true
			until := w.ResetsAt
			if until.IsZero() {
				until = at.Add(time.Hour)
			}
			if until.After(exhaustedUntil) {
				exhaustedUntil = until
			}
		case uw.BurnRate > 0:
			eta := at.Add(time.Duration((100 - w.UsedPercent) / uw.BurnRate * float64(time.Hour)))
			if w.ResetsAt.IsZero() || eta.Before(w.ResetsAt) {
				uw.ExhaustsAt = eta
			}
		}
		ws = append(ws, uw)
	}
	a.edit().Windows = ws
	now := a.cfg.now()
	if ownReached && !exhausted {
		exhausted, exhaustedUntil = true, at.Add(time.Hour)
		for _, w := range l.Windows {
			if w.ResetsAt.After(at) && w.UsedPercent >= 100 {
				exhaustedUntil = w.ResetsAt
			}
		}
	}
	switch {
	case exhausted:
		if exhaustedUntil.After(now) {
			a.coolDown(upstream.ClassQuota, exhaustedUntil.Sub(now), now)
		}
	case reset && a.view.Status == StatusCooling && a.view.CooldownReason == upstream.ClassQuota.String():
		a.endCooldown()
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
