// Package hygiene is the account hygiene rule: a periodic sweep over the
// pool's account views that flags, or disables, accounts that keep failing
// authentication or stay rate-limited past a threshold, with the reason,
// and restores one in a single call (docs/admin-api.md#account-hygiene).
//
// The sweep reads the views the account actors publish (it never asks an
// actor), so it costs one pass over the pool per Rule.Interval. Flags are
// kept in storage (the setting SettingKey), so a disabled account keeps
// its reason across restarts.
package hygiene

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// The rule's actions.
const (
	ActionOff     = "off"     // no sweep
	ActionFlag    = "flag"    // record the reason; the account keeps its state
	ActionDisable = "disable" // record the reason and disable the account (stored, so it stays out after a restart)
)

// SettingKey is the storage setting that holds the flags (a JSON array of Flag).
const SettingKey = "account_hygiene"

// Rule is the hygiene rule (the hygiene.* configuration keys).
type Rule struct {
	// Action is ActionOff (the zero value means off too), ActionFlag or
	// ActionDisable.
	Action string `json:"action"`
	// Unauthorized trips the rule for an account that has been
	// unauthorized this long: its credentials were refused and a refresh
	// (where it has one) did not help. 0: at the first sweep that sees it;
	// negative: never.
	Unauthorized time.Duration `json:"unauthorized_after"`
	// RateLimited trips the rule for an account that has been rate
	// limited (cooling for rate or quota, or refused for them since the
	// last sweep) at every sweep for this long. 0: never.
	RateLimited time.Duration `json:"rate_limited_after"`
	// Interval is the time between sweeps; default DefaultInterval.
	Interval time.Duration `json:"interval"`
}

// DefaultInterval is Rule.Interval when unset.
const DefaultInterval = time.Minute

// Validate reports a rule that cannot run, naming the configuration key.
func (r Rule) Validate() error {
	switch r.Action {
	case "", ActionOff, ActionFlag, ActionDisable:
	default:
		return fmt.Errorf("hygiene.action %q: want off, flag or disable", r.Action)
	}
	if r.RateLimited < 0 {
		return fmt.Errorf("hygiene.rate_limited_after %s: want a duration, 0s for never", r.RateLimited)
	}
	if r.Interval < 0 {
		return fmt.Errorf("hygiene.interval %s: want a positive duration", r.Interval)
	}
	return nil
}

// On reports whether the rule sweeps at all.
func (r Rule) On() bool { return r.Action == ActionFlag || r.Action == ActionDisable }

// Flag is an account the rule tripped on.
type Flag struct {
	AccountID string    `json:"account_id"`
	Name      string    `json:"name"`
	Action    string    `json:"action"` // ActionFlag or ActionDisable: what the rule did
	Reason    string    `json:"reason"` // why, for the operator
	Kind      string    `json:"kind"`   // "unauthorized" or "rate_limited"
	Since     time.Time `json:"since"`  // when the account entered the state
	At        time.Time `json:"at"`     // when the rule tripped
}

// Store is what the keeper needs of storage (storage.Store has it).
type Store interface {
	GetAccount(ctx context.Context, idOrName string) (storage.Account, error)
	PutAccount(ctx context.Context, a storage.Account) (storage.Account, error)
	GetSetting(ctx context.Context, key string) (string, error)
	PutSetting(ctx context.Context, key, value string) error
}

// Pool is what the keeper needs of the running pool (*actors.System).
type Pool interface {
	Views() []actors.View
	PutAccount(a storage.Account)
}

// Keeper runs the rule. Build it with New; it is safe for concurrent use.
type Keeper struct {
	rule  Rule
	store Store
	pool  Pool
	log   *slog.Logger
	now   func() time.Time

	mu        sync.Mutex
	flags     map[string]Flag      // by account ID
	limited   map[string]time.Time // accounts rate limited at every sweep since then
	lastSweep time.Time
}

// New returns a keeper of rule over store and pool, with the flags stored
// before. log nil: slog.Default(); now nil: time.Now.
func New(ctx context.Context, rule Rule, store Store, pool Pool, log *slog.Logger, now func() time.Time) (*Keeper, error) {
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	if rule.Action == "" {
		rule.Action = ActionOff
	}
	if rule.Interval == 0 {
		rule.Interval = DefaultInterval
	}
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	k := &Keeper{rule: rule, store: store, pool: pool, log: log, now: now, flags: map[string]Flag{}, limited: map[string]time.Time{}}
	if err := k.reload(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// Rule returns the rule the keeper runs.
func (k *Keeper) Rule() Rule { return k.rule }

// load reads the stored flags (none when the setting is missing).
func (k *Keeper) load(ctx context.Context) ([]Flag, error) {
	v, err := k.store.GetSetting(ctx, SettingKey)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && v == "") {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hygiene: read flags: %w", err)
	}
	var flags []Flag
	if err := json.Unmarshal([]byte(v), &flags); err != nil {
		return nil, fmt.Errorf("hygiene: setting %s is not a list of flags: %w", SettingKey, err)
	}
	return flags, nil
}

// reload makes the stored flags the keeper's: storage is the truth, so
// instances sharing it see each other's flags and restores. Called under mu.
func (k *Keeper) reload(ctx context.Context) error {
	stored, err := k.load(ctx)
	if err != nil {
		return err
	}
	clear(k.flags)
	for _, f := range stored {
		k.flags[f.AccountID] = f
	}
	return nil
}

// save stores the keeper's flags; called under mu, right after a reload
// and the change.
func (k *Keeper) save(ctx context.Context) error {
	flags := k.listLocked()
	b, err := json.Marshal(flags)
	if err != nil {
		return err
	}
	if err := k.store.PutSetting(ctx, SettingKey, string(b)); err != nil {
		return fmt.Errorf("hygiene: store flags: %w", err)
	}
	return nil
}

// Flags returns the accounts the rule tripped on, oldest first: this
// keeper's and those other instances stored.
func (k *Keeper) Flags(ctx context.Context) ([]Flag, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.reload(ctx)
	return k.listLocked(), err
}

func (k *Keeper) listLocked() []Flag {
	out := make([]Flag, 0, len(k.flags))
	for _, f := range k.flags {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Flag) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.AccountID, b.AccountID)
	})
	return out
}

// Flagged counts the flags of kind ("unauthorized" or "rate_limited") as
// of the keeper's last look at storage (its sweep, a listing, a restore),
// without reading storage: for metrics. 0 on a nil keeper.
func (k *Keeper) Flagged(kind string) int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, f := range k.flags {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

// Flag returns the flag of account id, if the rule tripped on it (here
// or on another instance).
func (k *Keeper) Flag(ctx context.Context, id string) (Flag, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.reload(ctx)
	f, ok := k.flags[id]
	return f, ok, err
}

// Run sweeps every Rule.Interval until ctx ends (at once when the rule is
// off, or k is nil). A panic in a sweep is logged and the loop goes on.
func (k *Keeper) Run(ctx context.Context) {
	if k == nil || !k.rule.On() {
		return
	}
	t := time.NewTicker(k.rule.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.safeSweep(ctx)
		}
	}
}

func (k *Keeper) safeSweep(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			k.log.Error("account hygiene sweep panic", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	if err := k.Sweep(ctx); err != nil {
		k.log.Warn("account hygiene sweep", "err", err)
	}
}

// Sweep runs the rule once over the pool: every account it trips on is
// flagged, and with ActionDisable disabled in storage and in the pool.
// An account already flagged is left alone until it is restored.
func (k *Keeper) Sweep(ctx context.Context) error {
	if !k.rule.On() {
		return nil
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.reload(ctx); err != nil {
		return err
	}
	prev := k.lastSweep
	k.lastSweep = now
	var tripped []Flag
	seen := make(map[string]bool, len(k.limited))
	for _, v := range k.pool.Views() {
		if _, done := k.flags[v.ID]; done {
			continue
		}
		if f, ok := k.judge(&v, prev, now, seen); ok {
			tripped = append(tripped, f)
		}
	}
	for id := range k.limited {
		if !seen[id] {
			delete(k.limited, id)
		}
	}
	var errs []error
	for _, f := range tripped {
		if f.Action == ActionDisable {
			if err := k.disable(ctx, f.AccountID); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		k.flags[f.AccountID] = f
		delete(k.limited, f.AccountID)
		done := "flagged"
		if f.Action == ActionDisable {
			done = "disabled"
		}
		k.log.Warn("account hygiene: "+done, "account", f.Name, "reason", f.Reason)
	}
	if len(tripped) > 0 {
		errs = append(errs, k.save(ctx))
	}
	return errors.Join(errs...)
}

// judge decides whether view v trips the rule at now (prev: the previous
// sweep, zero at the first); seen collects the accounts rate limited now.
func (k *Keeper) judge(v *actors.View, prev, now time.Time, seen map[string]bool) (Flag, bool) {
	f := Flag{AccountID: v.ID, Name: v.Name, Action: k.rule.Action, At: now}
	if v.Status == actors.StatusUnauthorized && k.rule.Unauthorized >= 0 {
		since := v.FailedAt(upstream.ClassAuth)
		if since.IsZero() || since.After(now) { // the view may be newer than the sweep's clock reading
			since = now
		}
		if now.Sub(since) >= k.rule.Unauthorized {
			f.Kind, f.Since = "unauthorized", since
			f.Reason = fmt.Sprintf("unauthorized since %s: the upstream refused its credentials (401) and a refresh did not help; give it new credentials, then restore it",
				since.UTC().Format(time.RFC3339))
			return f, true
		}
		return Flag{}, false
	}
	if k.rule.RateLimited <= 0 || !rateLimited(v, prev) {
		return Flag{}, false
	}
	seen[v.ID] = true
	since, ok := k.limited[v.ID]
	if !ok {
		since = now
		k.limited[v.ID] = since
	}
	if now.Sub(since) < k.rule.RateLimited {
		return Flag{}, false
	}
	f.Kind, f.Since = "rate_limited", since
	f.Reason = fmt.Sprintf("rate limited at every check since %s (%s, threshold %s); last cooldown: %s",
		since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second), k.rule.RateLimited, orNone(v.CooldownReason))
	return f, true
}

// rateLimited reports whether v is rate limited now: cooling for rate or
// quota, or refused for either since prev.
func rateLimited(v *actors.View, prev time.Time) bool {
	if v.Status == actors.StatusCooling && (v.CooldownReason == upstream.ClassRate.String() || v.CooldownReason == upstream.ClassQuota.String()) {
		return true
	}
	if prev.IsZero() {
		return false
	}
	return v.FailedAt(upstream.ClassRate).After(prev) || v.FailedAt(upstream.ClassQuota).After(prev)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// disable stores account id disabled and tells the pool.
func (k *Keeper) disable(ctx context.Context, id string) error {
	a, err := k.store.GetAccount(ctx, id)
	if err != nil {
		return fmt.Errorf("hygiene: disable %s: %w", id, err)
	}
	if a.Disabled {
		return nil
	}
	a.Disabled = true
	if a, err = k.store.PutAccount(ctx, a); err != nil {
		return fmt.Errorf("hygiene: disable %s: %w", id, err)
	}
	k.pool.PutAccount(a)
	return nil
}

// ErrNotFound is returned by Restore for an account storage does not have.
var ErrNotFound = errors.New("hygiene: no such account")

// Restore puts account idOrName back in service in one call: its flag is
// cleared, it is enabled if it was disabled, and its live state (an
// unauthorized or cooling account) is reset to active, as a disable and
// enable would. It returns the flag it cleared (ok false when there was
// none).
func (k *Keeper) Restore(ctx context.Context, idOrName string) (flag Flag, ok bool, err error) {
	a, err := k.store.GetAccount(ctx, idOrName)
	if errors.Is(err, storage.ErrNotFound) {
		return Flag{}, false, ErrNotFound
	}
	if err != nil {
		return Flag{}, false, err
	}
	if a.Disabled {
		a.Disabled = false
		if a, err = k.store.PutAccount(ctx, a); err != nil {
			return Flag{}, false, fmt.Errorf("hygiene: enable %s: %w", a.Name, err)
		}
	} else {
		off := a
		off.Disabled = true
		k.pool.PutAccount(off) // the pool applies both in order: the account comes back active
	}
	k.pool.PutAccount(a)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.reload(ctx); err != nil {
		return Flag{}, false, err
	}
	flag, ok = k.flags[a.ID]
	delete(k.flags, a.ID)
	delete(k.limited, a.ID)
	if ok {
		if err := k.save(ctx); err != nil {
			return flag, ok, err
		}
		k.log.Info("account hygiene: restored", "account", a.Name, "was", flag.Reason)
	}
	return flag, ok, nil
}
