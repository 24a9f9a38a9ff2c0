package actors

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Refresh defaults.
const (
	// DefaultRefreshLead is how long before its access token expires a codex
	// account refreshes it: 5 minutes.
	DefaultRefreshLead = 5 * time.Minute
	// refreshLeaseTTL bounds one instance's hold on an account's refresh.
	refreshLeaseTTL = 30 * time.Second
	// refreshTimeout bounds one refresh, waiting for another instance included.
	refreshTimeout = 60 * time.Second
	// refreshRetryBase and refreshRetryMax bound the backoff after network
	// or server errors: 5 s doubling to 5 min.
	refreshRetryBase = 5 * time.Second
	refreshRetryMax  = 5 * time.Minute
	// minRefreshGap is the shortest time between two refreshes ahead of expiry.
	minRefreshGap = time.Second
	// authCooldown keeps a 401'd account out while its refresh runs.
	authCooldown = time.Minute
)

// TokenRefresher exchanges a refresh token for new tokens
// (*upstream.OAuth implements it).
type TokenRefresher interface {
	Refresh(ctx context.Context, refreshToken string) (upstream.Tokens, error)
}

// Leaser takes and frees short named leases shared by every instance
// (storage.Cache implements it): the refresh of one account runs in one
// instance at a time.
type Leaser interface {
	AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, key, owner string) error
}

// AccountStore is what the refresh needs from storage (storage.Accounts
// implements it): read the stored account, and persist rotated tokens,
// sealed by the backend.
type AccountStore interface {
	GetAccount(ctx context.Context, idOrName string) (storage.Account, error)
	PutAccount(ctx context.Context, a storage.Account) (storage.Account, error)
}

// RefreshConfig turns on OAuth token refresh for codex accounts with a
// refresh token. All fields but Lead and Owner are required.
type RefreshConfig struct {
	OAuth  TokenRefresher
	Store  AccountStore
	Leases Leaser
	// Lead is how long before the access token's exp the refresh runs;
	// default DefaultRefreshLead.
	Lead time.Duration
	// Owner names this instance in refresh leases (default a random id).
	Owner string
}

// refresher runs one account's refresh: off the actor, on a goroutine the
// actor starts and whose result comes back as accountRefreshed.
type refresher struct {
	cfg RefreshConfig
	log *slog.Logger
}

// leaseKey is the cache lease that serializes an account's refreshes
// across instances.
func leaseKey(id string) string { return "codex-refresh:" + id }

// run refreshes acc's tokens, at most one instance at a time: it takes the
// account's lease (waiting while another instance holds it, and adopting
// what that instance stored), re-reads the stored account (a rotated refresh
// token there means the refresh is done already), calls the OAuth server and
// persists the new tokens. adopted reports that the tokens came from storage.
func (r *refresher) run(ctx context.Context, acc storage.Account) (out storage.Account, adopted bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	key := leaseKey(acc.ID)
	for {
		ok, lerr := r.cfg.Leases.AcquireLease(ctx, key, r.cfg.Owner, refreshLeaseTTL)
		if lerr != nil {
			// The shared cache is down: refresh anyway rather than let the
			// token expire (the fallback cache makes this rare).
			r.log.Warn("refresh lease unavailable; refreshing without it", "account", acc.Name, "err", lerr)
			break
		}
		if ok {
			defer r.cfg.Leases.ReleaseLease(context.WithoutCancel(ctx), key, r.cfg.Owner)
			break
		}
		select {
		case <-ctx.Done():
			return acc, false, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if cur, gerr := r.cfg.Store.GetAccount(ctx, acc.ID); gerr == nil && rotated(acc, cur) {
			return cur, true, nil
		}
	}
	stored := false // the account was in storage before the call
	if cur, gerr := r.cfg.Store.GetAccount(ctx, acc.ID); gerr == nil {
		if rotated(acc, cur) {
			return cur, true, nil
		}
		acc, stored = cur, true
	} else if !errors.Is(gerr, storage.ErrNotFound) {
		return acc, false, gerr
	}
	tok, err := r.cfg.OAuth.Refresh(ctx, acc.Credentials.RefreshToken)
	if err != nil {
		return acc, false, err
	}
	c := &acc.Credentials
	c.AccessToken = tok.AccessToken
	if tok.RefreshToken != "" {
		c.RefreshToken = tok.RefreshToken
	}
	if tok.IDToken != "" {
		c.IDToken = tok.IDToken
	}
	for _, t := range []string{c.IDToken, c.AccessToken} {
		if cl, ok := upstream.ParseTokenClaims(t); ok && cl.Plan != "" {
			c.Plan = cl.Plan // a plan change shows in the new tokens
			break
		}
	}
	upstream.FillFromClaims(c)
	// Only the tokens are the refresher's: an operator's change stored
	// while the OAuth server was asked (disabled, models, priority…) is
	// kept, and an account deleted meanwhile is not stored again.
	switch cur, gerr := r.cfg.Store.GetAccount(context.WithoutCancel(ctx), acc.ID); {
	case gerr == nil:
		cc := &cur.Credentials
		cc.AccessToken, cc.RefreshToken, cc.IDToken, cc.Plan = c.AccessToken, c.RefreshToken, c.IDToken, c.Plan
		upstream.FillFromClaims(cc)
		acc = cur
	case stored && errors.Is(gerr, storage.ErrNotFound):
		r.log.Info("refreshed account was deleted meanwhile; tokens not stored", "account", acc.Name)
		return acc, false, nil
	}
	put, err := r.cfg.Store.PutAccount(context.WithoutCancel(ctx), acc)
	if err != nil {
		// The old refresh token is spent: keep the new tokens in memory so
		// the account goes on working; the next refresh tries to store again.
		r.log.Error("refreshed tokens not stored", "account", acc.Name, "err", err)
		return acc, false, nil
	}
	return put, false, nil
}

// rotated reports whether cur (as stored) holds newer tokens than acc.
func rotated(acc, cur storage.Account) bool {
	return cur.Credentials.RefreshToken != "" && cur.Credentials.RefreshToken != acc.Credentials.RefreshToken
}

// --- the account actor's side ------------------------------------------------

// canRefresh reports whether this account refreshes its tokens.
func (a *account) canRefresh() bool {
	return a.cfg.refresh != nil && a.cfg.account.Provider == storage.ProviderCodex && a.cfg.account.Credentials.RefreshToken != ""
}

// scheduleRefresh sets the refresh timer from the access token's exp: at
// exp − lead, at once when there is no access token. Without an exp claim
// the token is refreshed only when the upstream refuses it.
func (a *account) scheduleRefresh() {
	if a.gos == nil && !a.canRefresh() {
		return // no timer set, none to set: most accounts, with no accountGos
	}
	g := a.goState()
	g.refreshGen++
	if g.refreshTimer != nil {
		g.refreshTimer.Stop()
		g.refreshTimer = nil
	}
	if !a.canRefresh() {
		return
	}
	var d time.Duration
	if tok := a.cfg.account.Credentials.AccessToken; tok != "" {
		exp := upstream.TokenExpiry(tok)
		if exp.IsZero() {
			return
		}
		d = max(exp.Add(-a.cfg.refresh.cfg.Lead).Sub(a.cfg.now()), 0)
		if !g.lastRefresh.IsZero() {
			// Tokens that live shorter than the lead must not spin.
			d = max(d, minRefreshGap-a.cfg.now().Sub(g.lastRefresh))
		}
	}
	a.refreshAfter(d)
}

func (a *account) refreshAfter(d time.Duration) {
	g := a.goState()
	gen, pid, eng := g.refreshGen, a.pid(), a.eng()
	if g.refreshTimer != nil {
		g.refreshTimer.Stop()
	}
	g.refreshTimer = time.AfterFunc(d, func() { eng.Send(pid, accountRefreshDue{gen: gen}) })
}

// startRefresh runs one refresh on a goroutine unless one is in flight
// (single flight per account; the lease makes it single across instances).
func (a *account) startRefresh(c *mailCtx) {
	if a.refreshing || !a.canRefresh() {
		return
	}
	a.refreshing = true
	acc := a.cfg.account
	acc.Models, acc.Tags = append([]string(nil), acc.Models...), append([]string(nil), acc.Tags...)
	pid, eng, ctx, r := a.pid(), c.Engine(), a.goContext(), a.cfg.refresh
	a.gos.goroutines.Go(func() { // gos made by goContext
		out, adopted, err := r.run(ctx, acc)
		eng.Send(pid, &accountRefreshed{account: out, adopted: adopted, err: err})
	})
}

// refreshed applies a refresh result.
func (a *account) refreshed(c *mailCtx, m *accountRefreshed) {
	a.refreshing = false
	now := a.cfg.now()
	g := a.goState() // made when the refresh started
	if m.err != nil {
		if a.goContext().Err() != nil {
			return // stopping
		}
		if upstream.Permanent(m.err) {
			a.cfg.log.Warn("codex refresh token refused; account needs a new login", "account", a.view.Name, "err", m.err)
			a.edit().Status = StatusUnauthorized
			a.publish(c)
			return
		}
		d := min(refreshRetryBase<<min(g.refreshFails, 6), refreshRetryMax)
		g.refreshFails++
		a.cfg.log.Info("codex refresh failed; retrying", "account", a.view.Name, "in", d, "err", m.err)
		g.refreshGen++
		a.refreshAfter(d)
		return
	}
	g.refreshFails = 0
	g.lastRefresh = now
	a.authRefreshed, a.authPending = a.authPending, false
	g.refreshes++
	a.configure(m.account)
	if tr, err := a.cfg.factory(m.account); err == nil {
		a.setTransport(tr)
	} else {
		a.cfg.log.Warn("account transport after refresh", "account", a.view.Name, "err", err)
	}
	if a.view.Status == StatusUnauthorized && !a.cfg.account.Disabled {
		a.edit().Status = StatusActive
	}
	if a.view.Status == StatusCooling && a.view.CooldownReason == upstream.ClassAuth.String() {
		a.endCooldown()
	}
	a.cfg.log.Debug("codex tokens refreshed", "account", a.view.Name, "adopted", m.adopted)
	a.scheduleRefresh()
	a.publish(c)
}

// authFailed handles a 401 on a refreshable account and reports whether it
// did (false: the account is unauthorized). A 401 on a lease granted
// before the last refresh used the old tokens and says nothing more. The
// first 401 on the current tokens rests the account and refreshes once; a
// 401 on tokens that such a refresh produced means the login is gone.
func (a *account) authFailed(c *mailCtx, now, granted time.Time) bool {
	if !a.canRefresh() {
		return false
	}
	if g := a.gos; g != nil && !g.lastRefresh.IsZero() && granted.Before(g.lastRefresh) {
		return true
	}
	if a.authRefreshed && !a.refreshing {
		return false
	}
	a.authPending = true
	a.coolDown(upstream.ClassAuth, authCooldown, now)
	a.startRefresh(c)
	return true
}

// endCooldown ends the current cooldown now (its timer is disarmed by the generation).
func (a *account) endCooldown() {
	a.coolGen++
	if a.coolTimer != nil {
		a.coolTimer.Stop()
	}
	v := a.edit()
	v.Status = StatusActive
	v.CooldownUntil = time.Time{}
	v.CooldownReason = ""
}
