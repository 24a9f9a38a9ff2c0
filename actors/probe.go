package actors

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// DefaultQuotaProbe is how often an account cooling for quota is probed when
// Config.QuotaProbe is 0.
const DefaultQuotaProbe = time.Minute

// probeEvery resolves Config.QuotaProbe: 0 is the default, negative is off.
func probeEvery(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultQuotaProbe
	}
	return d
}

// probeTimeout bounds one probe request.
const probeTimeout = 30 * time.Second

// accountProbe is the account's probe timer: probe now if the quota
// cooldown of generation gen still holds.
type accountProbe struct{ gen uint64 }

// accountProbed is a probe's answer, sent back by the goroutine that made it.
type accountProbed struct {
	gen     uint64
	status  int              // upstream status; 0 when there was no HTTP answer
	verdict upstream.Verdict // classified failure; ClassNone on a 2xx answer
}

// armProbe schedules the next probe of the current quota cooldown, when
// probes are on. Called from the actor.
func (a *account) armProbe() {
	if a.cfg.probeEvery <= 0 || a.box == nil {
		return
	}
	if a.probeTimer != nil {
		a.probeTimer.Stop()
	}
	gen, pid, eng := a.coolGen, a.pid(), a.eng()
	a.probeTimer = time.AfterFunc(a.cfg.probeEvery, func() { eng.Send(pid, accountProbe{gen: gen}) })
}

// quotaCooling reports whether the account rests for quota in cooldown generation gen.
func (a *account) quotaCooling(gen uint64) bool {
	return gen == a.coolGen && a.view.Status == StatusCooling && a.view.CooldownReason == upstream.ClassQuota.String()
}

// probe sends one minimal request (probeRequest) to the upstream on a goroutine the actor owns (cancelled
// when it stops), so no I/O runs in Receive; the answer comes back as
// accountProbed. Only a request for a model the account serves is
// meaningful: the model of its last lease, else its first configured one;
// without either there is nothing to ask and the cooldown runs out on its timer.
func (a *account) probe(m accountProbe) {
	if !a.quotaCooling(m.gen) || a.probing {
		return
	}
	model := a.lastModel
	if model == "" && len(a.view.Models) > 0 {
		model = a.view.Models[0]
	}
	if model == "" || a.transport == nil {
		return
	}
	req := probeRequest(a.view.Provider, model)
	if req == nil {
		return
	}
	a.probing = true
	a.edit().Probes++
	tr, gen, pid, eng, ctx, name, log := a.transport, m.gen, a.pid(), a.eng(), a.goContext(), a.view.Name, a.cfg.log
	go func() {
		out := accountProbed{gen: gen, verdict: upstream.Verdict{Class: upstream.ClassTransient}}
		defer func() {
			if r := recover(); r != nil {
				log.Error("quota probe panic", "account", name, "panic", r)
			}
			eng.Send(pid, out)
		}()
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		resp, err := tr.Do(pctx, req)
		if err != nil {
			out.verdict = upstream.ClassifyError(err)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		out.status = resp.Status
		if resp.Status >= 200 && resp.Status <= 299 {
			out.verdict = upstream.Verdict{}
			return
		}
		out.verdict = upstream.Classify(resp.Status, resp.Header, body)
	}()
}

// probeRequest is the quota probe of an account of provider p for model:
// a Chat request for one output token where the provider speaks Chat, else
// a Responses request with a one-word input and no token limit — the only
// provider speaking Responses alone is codex, whose backend refuses
// max_output_tokens (docs/codex.md#request-body) — else nil (nothing to
// probe with).
func probeRequest(p storage.Provider, model string) *upstream.Request {
	switch {
	case upstream.Supports(p, translate.Chat):
		return &upstream.Request{Endpoint: translate.Chat,
			Body: []byte(`{"model":` + strconv.Quote(model) + `,"messages":[{"role":"user","content":"ping"}],"max_completion_tokens":1}`)}
	case upstream.Supports(p, translate.Responses):
		return &upstream.Request{Endpoint: translate.Responses,
			Body: []byte(`{"model":` + strconv.Quote(model) + `,"input":"ping","store":false}`)}
	}
	return nil
}

// probed applies a probe's answer: a 2xx is the upstream's evidence that the
// quota is back, and ends the cooldown at once; a quota refusal with a reset
// replaces the recorded reset (a stale, later one never keeps the account
// out); anything else says nothing and the next probe is armed.
func (a *account) probed(c *mailCtx, m accountProbed) {
	a.probing = false
	if !a.quotaCooling(m.gen) {
		return
	}
	now := a.cfg.now()
	switch {
	case m.verdict.Class == upstream.ClassNone:
		a.cfg.log.Info("quota back early: the upstream answered a probe", "account", a.view.Name,
			"cooldown_left", a.view.CooldownUntil.Sub(now).Round(time.Second))
		a.endCooldown()
		a.publish(c)
		return
	case m.verdict.Class == upstream.ClassQuota && m.verdict.RetryAfter > 0:
		if until := now.Add(m.verdict.RetryAfter); !until.Equal(a.view.CooldownUntil) {
			a.edit().CooldownUntil = until
			a.coolGen++
			if a.coolTimer != nil {
				a.coolTimer.Stop()
			}
			gen, pid, eng := a.coolGen, a.pid(), a.eng()
			a.coolTimer = time.AfterFunc(m.verdict.RetryAfter, func() { eng.Send(pid, accountCooldownEnd{gen: gen}) })
		}
	}
	a.publish(c) // the new reset, if any, and the probe count
	a.armProbe()
}

// stopProbes stops the probe timer (the actor stops; a running probe's
// context is cancelled with the account's other goroutines').
func (a *account) stopProbes() {
	if a.probeTimer != nil {
		a.probeTimer.Stop()
	}
}
