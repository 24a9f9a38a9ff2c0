package actors

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// This file is routing across instances (docs/fleet.md, stage 3): with
// Config.Fenced, the scheduler also indexes the views other instances
// publish of the accounts they own (remote entries, read-only), so the
// policy scores every account of the deployment. A pick of a remote entry
// asks its owner for a lease (Remote.Grant, off the scheduler's goroutine);
// only the owner's account actor grants, so a stale remote view costs a
// refusal and a new pick, never an over-admission. A local pick costs what
// it did before: remote entries change nothing on that path.

// Remote reaches the accounts other instances own (package fleet
// implements it over the internal endpoint). Its methods are called from
// goroutines of the System's; they must be safe for concurrent use.
type Remote interface {
	// Grant asks owner (a member ID) for a lease on req.Account. A refusal
	// is a RemoteGrant with Granted false and the owner's current view; an
	// error means the owner could not be asked or did not answer (it is
	// then treated as unavailable until its next published view).
	Grant(ctx context.Context, owner string, req RemoteRequest) (RemoteGrant, error)
	// Release ends the lease handle that owner granted, with the outcome
	// of its request and the usage limits the upstream reported meanwhile
	// (nil: none). It must not block the caller for a round trip; an
	// owner that never gets it ends the lease itself (docs/fleet.md).
	Release(owner, handle string, out Outcome, limits *upstream.RateLimits)
}

// RemoteRequest is what an instance asks an account's owner for: a lease
// on Account for a request for Model in Group, spoken in Endpoint (Native:
// only a provider speaking it serves it).
type RemoteRequest struct {
	Account   string             `json:"account"`
	Model     string             `json:"model"`
	Group     string             `json:"group,omitempty"`
	Endpoint  translate.Protocol `json:"endpoint"`
	Native    bool               `json:"native,omitempty"`
	RequestID string             `json:"request_id,omitempty"`
}

// RemoteGrant is an owner's answer to a RemoteRequest.
type RemoteGrant struct {
	Granted bool
	// Handle names the lease on the owner, for Remote.Release.
	Handle string
	// Account is the account's configuration with its credentials, to
	// build the transport the upstream call runs on (Granted only).
	Account storage.Account
	// View is the account's view on the owner when it answered; on a
	// refusal it says why (in flight at its limit, cooling, moving).
	View View
	// RetryAfter is the owner's hint on a refusal.
	RetryAfter time.Duration
}

// ErrNotOwned is GrantLocal's answer for an account this instance does not run.
var ErrNotOwned = errors.New("actors: account not owned by this instance")

// remoteStale is how long a remote entry lives without a view from its
// owner: owners publish every view at least every few seconds
// (fleet.ViewsFull), so an entry this old is an owner gone.
const remoteStale = 15 * time.Second

// remoteGrantTimeout bounds one ask of an owner.
const remoteGrantTimeout = 5 * time.Second

// remoteSide is the System's half of routing across instances: the
// Remote, and the transports built for remote accounts (one per account
// and credential, so keep-alive connections are reused across leases).
type remoteSide struct {
	remote  Remote
	factory TransportFactory
	mu      sync.Mutex
	byID    map[string]*remoteAccount
	count   atomic.Int64 // remote entries in the scheduler's index
	views   sync.Map     // account ID → *View: the remote entries' last views, for System.View
}

// remoteAccount is a remote account's transport on this instance, and the
// usage limits its answers reported since the last release.
type remoteAccount struct {
	fingerprint [32]byte
	transport   upstream.Transport
	limits      atomic.Pointer[upstream.RateLimits]
}

// transport returns the transport of acc, built once per credential.
func (r *remoteSide) transport(acc storage.Account) (*remoteAccount, error) {
	b, _ := json.Marshal(struct {
		B string
		C storage.Credentials
		P storage.Provider
	}{acc.BaseURL, acc.Credentials, acc.Provider})
	fp := sha256.Sum256(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ra := r.byID[acc.ID]; ra != nil && ra.fingerprint == fp {
		return ra, nil
	}
	tr, err := r.factory(acc)
	if err != nil {
		return nil, err
	}
	ra := &remoteAccount{fingerprint: fp}
	ra.transport = tr
	if acc.Provider == storage.ProviderCodex {
		lt := &limitsTransport{Transport: tr, report: func(l upstream.RateLimits, _ time.Time, _ string) { ra.limits.Store(&l) }}
		if d, ok := tr.(upstream.WebSocketDialer); ok {
			ra.transport = &limitsWSTransport{limitsTransport: lt, WebSocketDialer: d}
		} else {
			ra.transport = lt
		}
	}
	if r.byID == nil {
		r.byID = make(map[string]*remoteAccount)
	}
	r.byID[acc.ID] = ra
	return ra, nil
}

// remoteLease is what a Lease granted by another instance carries.
type remoteLease struct {
	owner, handle string
	account       *remoteAccount
}

// SetRemote makes the scheduler route to the accounts other instances
// own (their views arrive with RemoteViews) through r. Call it once, before
// the first RemoteViews; without it the scheduler knows its own accounts only.
func (s *System) SetRemote(r Remote) {
	s.remote.remote = r
	s.engine.Send(s.sched, schedSetRemote{side: &s.remote})
}

// RemoteViews hands the scheduler the views owner (a member ID) published
// of the accounts it owns. Views of accounts this instance runs are
// ignored: its own actor is their truth. Views of an account owned by
// another member before replace that member's.
func (s *System) RemoteViews(owner string, views []View) {
	if len(views) > 0 {
		s.engine.Send(s.sched, &schedRemoteViews{owner: owner, views: views})
	}
}

// RemoteAccounts returns how many accounts the scheduler indexes from
// other instances' views (0 without SetRemote).
func (s *System) RemoteAccounts() int { return int(s.remote.count.Load()) }

// GrantLocal serves another instance's RemoteRequest: a lease on the
// account, which this instance must run, for that instance to call the
// upstream with. It never waits for capacity: a busy, cooling or moving
// account refuses (AcquireError, with its view). On a grant it returns the
// lease (to Release with the caller's outcome) and the account's
// configuration with its credentials. ErrNotOwned when the account does
// not run here.
func (s *System) GrantLocal(ctx context.Context, req RemoteRequest) (*Lease, storage.Account, View, error) {
	if _, ok := s.snapshots.load(req.Account); !ok {
		return nil, storage.Account{}, View{}, ErrNotOwned
	}
	l, err := s.Acquire(ctx, AcquireRequest{Only: req.Account, Model: req.Model, Group: req.Group, Endpoint: req.Endpoint, Native: req.Native})
	v, _ := s.View(req.Account) // after the grant: its counters count it
	if err != nil {
		return nil, storage.Account{}, v, err
	}
	l.RequestID = req.RequestID
	reply := make(chan storage.Account, 1)
	l.box.send(accountConfigAsk{reply: reply}, nil)
	select {
	case acc := <-reply:
		return l, acc, v, nil
	case <-ctx.Done():
		s.Release(l, Outcome{Verdict: canceledVerdict})
		return nil, storage.Account{}, v, ctx.Err()
	}
}

// accountConfigAsk asks an account actor for its configuration, credentials included.
type accountConfigAsk struct{ reply chan storage.Account }

// --- scheduler --------------------------------------------------------------------

// schedSetRemote installs the remote side.
type schedSetRemote struct{ side *remoteSide }

// schedRemoteViews carries views another instance published.
type schedRemoteViews struct {
	owner string
	views []View
}

// schedRemoteRefused returns a request an owner did not grant: with the
// owner's view, or, unreachable, with none (the entry then counts as
// moving until its owner's next view).
type schedRemoteRefused struct {
	req   *acquireState
	id    string
	owner string
	view  *View
}

// receiveRemote handles the remote messages; it reports whether msg was one.
func (s *scheduler) receiveRemote(c *mailCtx, msg any) bool {
	switch m := msg.(type) {
	case schedSetRemote:
		s.remote = m.side
	case *schedRemoteViews:
		now := s.cfg.now()
		for i := range m.views {
			s.onRemoteView(c, m.owner, &m.views[i], now)
		}
	case *schedRemoteRefused:
		s.stats.Refusals++
		if e := s.byID[m.id]; e != nil && e.ownerName() == m.owner {
			if m.view != nil {
				s.onRemoteView(c, m.owner, m.view, s.cfg.now())
			} else if !e.view.Moving {
				e.rewrite(func(v *View) { v.Moving = true })
				s.file(e, s.cfg.now())
			}
		}
		if m.req.state.Load() == acqPending {
			m.req.tries++
			s.acquire(c, m.req)
		}
	default:
		return false
	}
	return true
}

// onRemoteView indexes v, published by owner, unless this instance runs the account.
func (s *scheduler) onRemoteView(c *mailCtx, owner string, v *View, now time.Time) {
	e := s.byID[v.ID]
	switch {
	case e == nil:
		e = &entry{idx: s.next, view: &noView, owner: &entryOwner{name: owner}}
		s.next++
		s.byID[v.ID] = e
		if s.remote != nil {
			s.remote.count.Add(1)
		}
	case e.owner == nil:
		return // runs here
	case e.owner.name != owner:
		e.owner.name = owner // a new owner counts its versions afresh
		e.rewrite(func(v *View) { v.Version = 0 })
	}
	e.owner.seen = now
	cp := *v // v is in the owner's batch: the entry keeps a view of its own
	s.onView(c, &cp, nil, nil, e.sent)
	if s.remote != nil {
		s.remote.views.Store(v.ID, &cp)
	}
}

// local makes a remote entry local: this instance now runs the account.
func (s *scheduler) local(e *entry) {
	if e.owner != nil {
		e.owner, e.sent = nil, 0
		e.rewrite(func(v *View) { v.Version = 0 })
		if s.remote != nil {
			s.remote.count.Add(-1)
			s.remote.views.Delete(e.view.ID)
		}
	}
}

// remoteView returns the last view of account id another instance owns.
func (s *System) remoteView(id string) (View, bool) {
	if v, ok := s.remote.views.Load(id); ok {
		return *v.(*View), true
	}
	return View{}, false
}

// sweepRemote drops remote entries whose owner has published nothing for remoteStale.
func (s *scheduler) sweepRemote(now time.Time) {
	for id, e := range s.byID {
		if e.owner != nil && now.Sub(e.owner.seen) > remoteStale {
			s.remove(id)
		}
	}
}

// grantRemote asks e's owner for a lease for req, on a goroutine of its
// own: the answer completes req, or comes back as a refusal.
//
//go:noinline
func (s *scheduler) grantRemote(c *mailCtx, e *entry, req *acquireState) {
	side, owner, box, pid := s.remote, e.ownerName(), c.box, c.pid
	rr := RemoteRequest{Account: e.view.ID, Model: req.Model, Group: req.Group, Endpoint: req.Endpoint, Native: req.Native}
	decision := req.lease.Decision // a copy: a refusal lets the scheduler pick req again while this lease is built
	send := func(m any) { box.send(m, pid) }
	if side == nil || side.remote == nil {
		send(&schedRemoteRefused{req: req, id: rr.Account, owner: owner})
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), remoteGrantTimeout)
		g, err := side.remote.Grant(ctx, owner, rr)
		cancel()
		if err != nil {
			send(&schedRemoteRefused{req: req, id: rr.Account, owner: owner})
			return
		}
		if !g.Granted {
			v := g.View
			if v.ID != rr.Account {
				send(&schedRemoteRefused{req: req, id: rr.Account, owner: owner})
				return
			}
			send(&schedRemoteRefused{req: req, id: rr.Account, owner: owner, view: &v})
			return
		}
		ra, err := side.transport(g.Account)
		if err != nil {
			side.remote.Release(owner, g.Handle, Outcome{Verdict: canceledVerdict}, nil)
			send(&schedRemoteRefused{req: req, id: rr.Account, owner: owner})
			return
		}
		if !req.state.CompareAndSwap(acqPending, acqGranted) {
			side.remote.Release(owner, g.Handle, Outcome{Verdict: canceledVerdict}, nil)
			return
		}
		req.reply <- acquireReply{lease: &Lease{
			AccountID: g.Account.ID,
			Name:      g.Account.Name,
			Provider:  g.Account.Provider,
			Transport: ra.transport,
			Granted:   time.Now(),
			Decision:  decision,
			remote:    &remoteLease{owner: owner, handle: g.Handle, account: ra},
		}}
	}()
}

// releaseRemote ends a lease another instance granted.
func (s *System) releaseRemote(l *Lease, out Outcome) {
	r := l.remote
	if out.RequestID == "" {
		out.RequestID = l.RequestID
	}
	s.remote.remote.Release(r.owner, r.handle, out, r.account.limits.Swap(nil))
}

// reportRemoteLimits keeps usage limits reported for a remote account for
// its next release; it reports whether the account is a remote one.
func (s *System) reportRemoteLimits(accountID string, l upstream.RateLimits) bool {
	s.remote.mu.Lock()
	ra := s.remote.byID[accountID]
	s.remote.mu.Unlock()
	if ra == nil {
		return false
	}
	if _, local := s.snapshots.load(accountID); local {
		return false
	}
	ra.limits.Store(&l)
	return true
}
