package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/internal/ratelog"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Paths of the internal endpoint, served on every member's announced
// address (fleet.addr: the front's listener by default) beside /v1.
const (
	PathGrant   = "/internal/fleet/v1/grant"
	PathRelease = "/internal/fleet/v1/release"
	// PathHeld asks a member which leases it holds on accounts the sender
	// has taken over (Peer.Adopt).
	PathHeld   = "/internal/fleet/v1/held"
	pathPrefix = "/internal/fleet/"
)

// DefaultMaxLease is the default PeerConfig.MaxLease.
const DefaultMaxLease = time.Hour

// maxMessage bounds the body of an internal message.
const maxMessage = 1 << 20

// LeasePool is what a Peer needs of this instance's actors (actors.System
// implements it): grant a lease on an account run here to another
// instance, end it with that instance's outcome, and fold in the usage
// limits its answers reported.
type LeasePool interface {
	GrantLocal(ctx context.Context, req actors.RemoteRequest) (*actors.Lease, storage.Account, actors.View, error)
	Release(l *actors.Lease, out actors.Outcome)
	Adopt(ctx context.Context, accountID, model string) (*actors.Lease, error)
	ReportRateLimits(accountID, model string, l upstream.RateLimits, at time.Time)
	View(accountID string) (actors.View, bool)
}

// PeerConfig configures a Peer.
type PeerConfig struct {
	Fleet  *Fleet    // the live set: owners' addresses, callers' liveness; required
	Codec  *Codec    // required
	Pool   LeasePool // required
	Logger *slog.Logger
	// Client sends the messages (default: keep-alive HTTP/1.1, 5 s timeout).
	Client *http.Client
	// MaxLease ends a lease granted to another instance whose release has
	// not come after this long although its holder is live (a lost
	// release); default DefaultMaxLease. A holder that leaves the live set
	// loses its leases a fleet.ttl after.
	MaxLease time.Duration
	// WithholdFor is the longest Adopt withholds a silent member's share of
	// an account taken over: a lease that member holds was granted for a
	// call that ends within the gateway's request timeout, so past it there
	// is nothing left to count. Default MaxLease; troupe serve sets
	// gateway.request_timeout.
	WithholdFor time.Duration
}

// Peer is this instance's side of routing across instances: as an
// account's owner it serves the internal endpoint (Handle), granting
// leases to the other instances and taking their releases; as a caller it
// asks owners for leases (it implements actors.Remote).
type Peer struct {
	cfg    PeerConfig
	log    *slog.Logger
	refuse *ratelog.Event
	ctx    context.Context // StartPeer's: the chases of silent members end with it

	mu      sync.Mutex
	leases  map[string]*granted  // handle → lease granted to another instance (or adopted)
	holding map[string]*holding  // handle → lease another instance granted to this one
	orphans map[string]time.Time // holder+" "+handle → when a release for no lease arrived
	addrs   map[string]string    // member ID → address, learned from its views

	issued, received, adopted atomic.Uint64
	withheld                  atomic.Int64 // leases counted for members that did not answer (Adopt)
	refusedMu                 sync.Mutex
	refused                   map[string]uint64 // reason → count
}

// granted is a lease this instance granted to another.
type granted struct {
	lease  *actors.Lease
	caller string
	model  string
	at     time.Time
	live   time.Time // last sweep that saw the caller live
}

// holding is a lease another instance granted to this one, not released
// yet: its account and the instance that counts it now (the granting
// owner, or the one that took the account over and adopted the lease).
type holding struct {
	account, owner, model string
	at                    time.Time
	// asked is the instance whose ask (PathHeld) made it the owner: the
	// lease is answered again to the same asker, whose first answer may
	// have been lost (it counts each handle once).
	asked string
}

// PeerStats are a Peer's counters since start.
type PeerStats struct {
	Issued   uint64 // leases this instance granted to others
	Received uint64 // leases others granted to this instance
	Held     int    // leases granted to others (or adopted) not released yet
	Adopted  uint64 // leases counted on accounts taken over, granted by their previous owner
	// Withheld is how many leases accounts taken over count now for the
	// members that did not answer the ask of their leases (Adopt): each
	// such account grants nothing of its max_concurrency that those
	// members may hold, until they answer or leave the live set.
	Withheld int
	Refused  map[string]uint64 // by reason (Refusal reasons, docs/fleet.md)
}

// StartPeer starts the Peer and its sweep of leases whose holder is gone,
// until ctx ends.
func StartPeer(ctx context.Context, cfg PeerConfig) (*Peer, error) {
	if cfg.Fleet == nil || cfg.Codec == nil || cfg.Pool == nil {
		return nil, errors.New("fleet: a peer needs Fleet, Codec and Pool")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxLease <= 0 {
		cfg.MaxLease = DefaultMaxLease
	}
	if cfg.WithholdFor <= 0 {
		cfg.WithholdFor = cfg.MaxLease
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, DisableCompression: true}}
	}
	p := &Peer{cfg: cfg, log: cfg.Logger, refuse: ratelog.New(10, 10*time.Second), ctx: ctx,
		leases: make(map[string]*granted), holding: make(map[string]*holding), orphans: make(map[string]time.Time), addrs: make(map[string]string), refused: make(map[string]uint64)}
	go p.sweep(ctx)
	return p, nil
}

// Stats returns the counters.
func (p *Peer) Stats() PeerStats {
	st := PeerStats{Issued: p.issued.Load(), Received: p.received.Load(), Adopted: p.adopted.Load(),
		Withheld: int(p.withheld.Load()), Refused: map[string]uint64{}}
	p.mu.Lock()
	st.Held = len(p.leases)
	p.mu.Unlock()
	p.refusedMu.Lock()
	for k, v := range p.refused {
		st.Refused[k] = v
	}
	p.refusedMu.Unlock()
	return st
}

func (p *Peer) count(reason string) {
	p.refusedMu.Lock()
	p.refused[reason]++
	p.refusedMu.Unlock()
}

// Owns reports whether path is the internal endpoint's.
func (p *Peer) Owns(path string) bool {
	return len(path) >= len(pathPrefix) && path[:len(pathPrefix)] == pathPrefix
}

// grantReply is the owner's answer to a grant.
type grantReply struct {
	Granted bool   `json:"granted"`
	Handle  string `json:"handle,omitempty"`
	// Account is the account's configuration with its credentials, JSON,
	// sealed (Codec.Seal) bound to Handle.
	Account    []byte        `json:"account,omitempty"`
	View       *actors.View  `json:"view,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	Reason     string        `json:"reason,omitempty"`
}

// releaseMsg ends a lease.
type releaseMsg struct {
	Handle  string               `json:"handle"`
	Outcome actors.Outcome       `json:"outcome"`
	Limits  *upstream.RateLimits `json:"limits,omitempty"`
}

// Handle serves one message to the internal endpoint: path, its
// envelope (the headers) and body. It returns the HTTP status, the
// reply's envelope (zero when the message was refused) and body. A message
// that fails Verify is refused with 401 and logged (sender as claimed,
// reason; never the body), and counted by reason.
func (p *Peer) Handle(ctx context.Context, path string, env Envelope, body []byte) (int, Envelope, []byte) {
	if path != PathGrant && path != PathRelease && path != PathHeld {
		return http.StatusNotFound, Envelope{}, nil
	}
	if err := p.cfg.Codec.Verify(env, path, body); err != nil {
		reason := Reason(err)
		p.count(reason)
		if ok, held := p.refuse.Take(ctx, p.log, slog.LevelWarn); ok {
			p.log.LogAttrs(ctx, slog.LevelWarn, "fleet: internal message refused", slog.String("reason", reason),
				slog.String("path", path), slog.String("sender", clip(env.Sender)), slog.Int64("suppressed", held))
		}
		return http.StatusUnauthorized, Envelope{}, []byte(`{"error":"refused"}`)
	}
	var out []byte
	switch path {
	case PathGrant:
		var req actors.RemoteRequest
		if json.Unmarshal(body, &req) != nil || req.Account == "" {
			p.count("malformed")
			return http.StatusBadRequest, Envelope{}, nil
		}
		out, _ = json.Marshal(p.grant(ctx, env.Sender, req))
	case PathRelease:
		var m releaseMsg
		if json.Unmarshal(body, &m) != nil {
			p.count("malformed")
			return http.StatusBadRequest, Envelope{}, nil
		}
		p.release(env.Sender, m)
		out = []byte(`{}`)
	case PathHeld:
		var m heldAsk
		if json.Unmarshal(body, &m) != nil {
			p.count("malformed")
			return http.StatusBadRequest, Envelope{}, nil
		}
		out, _ = json.Marshal(p.held(env.Sender, m))
	}
	return http.StatusOK, p.cfg.Codec.Sign(p.cfg.Fleet.Self().ID, replyPath(env.Nonce), out), out
}

// replyPath is what a reply is signed for: the request's nonce, so a
// reply answers that request only.
func replyPath(nonce string) string { return "reply " + nonce }

func clip(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// grant serves a grant asked by caller.
func (p *Peer) grant(ctx context.Context, caller string, req actors.RemoteRequest) grantReply {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, acc, v, err := p.cfg.Pool.GrantLocal(ctx, req)
	if err != nil {
		r := grantReply{Reason: refusal(err)}
		if v.ID != "" {
			r.View = &v
		}
		var ae *actors.AcquireError
		if errors.As(err, &ae) {
			r.RetryAfter = ae.RetryAfter
		}
		p.count(r.Reason)
		return r
	}
	var h [16]byte
	_, _ = rand.Read(h[:])
	handle := hex.EncodeToString(h[:])
	plain, err := json.Marshal(acc)
	if err != nil {
		p.cfg.Pool.Release(l, actors.Outcome{Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
		return grantReply{Reason: "internal"}
	}
	now := time.Now()
	p.mu.Lock()
	p.leases[handle] = &granted{lease: l, caller: caller, model: req.Model, at: now, live: now}
	p.mu.Unlock()
	p.issued.Add(1)
	return grantReply{Granted: true, Handle: handle, Account: p.cfg.Codec.Seal(plain, []byte(handle)), View: &v}
}

// refusal is the reason label of a GrantLocal error.
func refusal(err error) string {
	switch {
	case errors.Is(err, actors.ErrNotOwned):
		return "not_owned"
	case errors.Is(err, actors.ErrBusy):
		return "busy"
	case errors.Is(err, actors.ErrUnavailable), errors.Is(err, actors.ErrNoAccount):
		return "unavailable"
	}
	return "internal"
}

// release ends a lease granted to caller.
func (p *Peer) release(caller string, m releaseMsg) {
	p.mu.Lock()
	g := p.leases[m.Handle]
	if g != nil && g.caller == caller {
		delete(p.leases, m.Handle)
	}
	p.mu.Unlock()
	if g == nil || g.caller != caller {
		if g == nil {
			// Ended already (expired), or a lease of an account taken
			// over whose adoption has not registered yet: remember it, so
			// that the adoption does not count a lease already ended.
			p.mu.Lock()
			if len(p.orphans) >= maxOrphans {
				clear(p.orphans)
			}
			p.orphans[caller+" "+m.Handle] = time.Now()
			p.mu.Unlock()
		}
		return // or not this caller's
	}
	if m.Limits != nil {
		p.cfg.Pool.ReportRateLimits(g.lease.AccountID, g.model, *m.Limits, time.Now())
	}
	p.cfg.Pool.Release(g.lease, m.Outcome)
}

// sweep ends, every second, the leases whose holder has left the live set
// for a fleet.ttl, or that are older than MaxLease.
func (p *Peer) sweep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live := map[string]bool{}
		for _, m := range p.cfg.Fleet.Members() {
			live[m.ID] = true
		}
		now := time.Now()
		var ended []*granted
		p.mu.Lock()
		for k, at := range p.orphans {
			if now.Sub(at) > orphanTTL {
				delete(p.orphans, k)
			}
		}
		for h, g := range p.leases {
			if live[g.caller] {
				g.live = now
			}
			if now.Sub(g.live) > p.cfg.Fleet.TTL() || now.Sub(g.at) > p.cfg.MaxLease {
				delete(p.leases, h)
				ended = append(ended, g)
			}
		}
		p.mu.Unlock()
		for _, g := range ended {
			p.log.Warn("fleet: lease granted to another instance ended without its release", "account", g.lease.Name, "holder", clip(g.caller), "held", now.Sub(g.at).Round(time.Millisecond))
			p.count("expired")
			p.cfg.Pool.Release(g.lease, actors.Outcome{Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
		}
	}
}

// errUnreachable is the caller's error when the owner cannot be asked.
var errUnreachable = errors.New("fleet: owner unreachable")

// addrOf returns the announced address of member id: from the live set,
// else as its views said (a member newer than this instance's last heartbeat).
func (p *Peer) addrOf(id string) (string, bool) {
	for _, m := range p.cfg.Fleet.Members() {
		if m.ID == id {
			return m.Addr, m.Addr != ""
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.addrs[id]
	return a, ok
}

// learn records the address member id's views announced.
func (p *Peer) learn(id, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addrs[id] == addr {
		return
	}
	if len(p.addrs) > 1024 {
		clear(p.addrs) // members come and go; the live ones are in the set
	}
	p.addrs[id] = addr
}

// send posts body to owner's path and returns the verified reply.
func (p *Peer) send(ctx context.Context, owner, path string, body []byte) ([]byte, error) {
	addr, ok := p.addrOf(owner)
	if !ok {
		return nil, fmt.Errorf("%w: not a live member", errUnreachable)
	}
	env := p.cfg.Codec.Sign(p.cfg.Fleet.Self().ID, path, body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderSender, env.Sender)
	req.Header.Set(HeaderTime, env.Time)
	req.Header.Set(HeaderNonce, env.Nonce)
	req.Header.Set(HeaderSignature, env.Signature)
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnreachable, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnreachable, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d", errUnreachable, resp.StatusCode)
	}
	renv := Envelope{Sender: resp.Header.Get(HeaderSender), Time: resp.Header.Get(HeaderTime),
		Nonce: resp.Header.Get(HeaderNonce), Signature: resp.Header.Get(HeaderSignature)}
	if renv.Sender != owner {
		p.count("forged")
		return nil, ErrForged
	}
	if err := p.cfg.Codec.Verify(renv, replyPath(env.Nonce), out); err != nil {
		p.count(Reason(err))
		return nil, err
	}
	return out, nil
}

// Grant asks owner for a lease (actors.Remote).
func (p *Peer) Grant(ctx context.Context, owner string, req actors.RemoteRequest) (actors.RemoteGrant, error) {
	body, _ := json.Marshal(req)
	out, err := p.send(ctx, owner, PathGrant, body)
	if err != nil {
		if errors.Is(err, errUnreachable) {
			p.count("unreachable")
		}
		return actors.RemoteGrant{}, err
	}
	var r grantReply
	if err := json.Unmarshal(out, &r); err != nil {
		p.count("malformed")
		return actors.RemoteGrant{}, ErrMalformed
	}
	g := actors.RemoteGrant{Granted: r.Granted, Handle: r.Handle, RetryAfter: r.RetryAfter}
	if r.View != nil {
		g.View = *r.View
	}
	if !r.Granted {
		return g, nil
	}
	plain, err := p.cfg.Codec.Open(r.Account, []byte(r.Handle))
	if err == nil {
		err = json.Unmarshal(plain, &g.Account)
	}
	if err != nil || g.Account.ID != req.Account {
		p.count("malformed")
		p.Release(owner, r.Handle, actors.Outcome{Verdict: upstream.Verdict{Class: upstream.ClassCanceled}}, nil)
		return actors.RemoteGrant{}, ErrMalformed
	}
	p.mu.Lock()
	p.holding[r.Handle] = &holding{account: req.Account, owner: owner, model: req.Model, at: time.Now()}
	p.mu.Unlock()
	p.received.Add(1)
	return g, nil
}

// Release ends a lease owner granted (actors.Remote), in the background:
// three tries; past them the owner ends the lease itself. The release goes
// to whichever instance counts the lease now: owner, or the instance that
// took the account over and adopted the lease (Adopt), this one included.
func (p *Peer) Release(owner, handle string, out actors.Outcome, limits *upstream.RateLimits) {
	p.mu.Lock()
	if h := p.holding[handle]; h != nil {
		owner = h.owner
		delete(p.holding, handle)
	}
	p.mu.Unlock()
	m := releaseMsg{Handle: handle, Outcome: out, Limits: limits}
	self := p.cfg.Fleet.Self().ID
	if owner == self {
		p.release(self, m) // adopted by this instance: no message
		return
	}
	body, _ := json.Marshal(m)
	go func() {
		for try := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := p.send(ctx, owner, PathRelease, body)
			cancel()
			if err == nil {
				return
			}
			if try == 2 {
				p.log.Warn("fleet: release not delivered; the owner ends the lease itself", "owner", clip(owner), "err", err)
				return
			}
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
		}
	}()
}

// maxOrphans bounds the releases remembered for no lease; orphanTTL is how
// long one is remembered (longer than an adoption, AdoptTimeout).
const (
	maxOrphans = 4096
	orphanTTL  = time.Minute
)

// heldAsk is a new owner's question to a member (PathHeld): which leases
// do you hold on these accounts, which I have taken over?
type heldAsk struct {
	Accounts []string `json:"accounts"`
}

// heldReply answers a heldAsk.
type heldReply struct {
	Leases []heldLease `json:"leases"`
}

// heldLease is one lease a member holds on an account taken over.
type heldLease struct {
	Handle  string        `json:"handle"`
	Account string        `json:"account"`
	Model   string        `json:"model,omitempty"`
	Age     time.Duration `json:"age"` // since its grant, on the holder's clock
}

// held answers owner's heldAsk: the leases this instance holds on its
// accounts that another instance granted, each now released to owner.
func (p *Peer) held(owner string, ask heldAsk) heldReply {
	want := make(map[string]bool, len(ask.Accounts))
	for _, id := range ask.Accounts {
		want[id] = true
	}
	now := time.Now()
	var r heldReply
	p.mu.Lock()
	defer p.mu.Unlock()
	for handle, h := range p.holding {
		if want[h.account] && (h.owner != owner || h.asked == owner) {
			h.owner, h.asked = owner, owner
			r.Leases = append(r.Leases, heldLease{Handle: handle, Account: h.account, Model: h.model, Age: now.Sub(h.at)})
		}
	}
	return r
}

// Adopt counts on accounts, which this instance has just taken, the
// leases their previous owner granted that still run: it asks every live
// member (itself included, without a message) which leases it holds on
// them, and counts each answer against the account's max_concurrency
// until its holder's release, which then comes here, or until the expiry
// of leases granted to others (Peer's sweep). It is OwnerConfig.Adopt.
//
// A member that does not answer before ctx ends may hold some of the
// leases: it is logged at WARN and, on each account, what the answers
// counted leaves of max_concurrency is withheld (counted as leases in
// flight, PeerStats.Withheld) until every such member has answered (its
// leases are then counted instead) or left the live set (asked again every
// heartbeat, and when the set changes), or PeerConfig.WithholdFor has
// passed (every call such a lease was granted for has ended by then). The
// account's fence may open: it grants only past what is counted and
// withheld.
func (p *Peer) Adopt(ctx context.Context, accounts []string) {
	ask := heldAsk{Accounts: accounts}
	body, _ := json.Marshal(ask)
	self := p.cfg.Fleet.Self().ID
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		silent  []string
		counted = map[string]int{}
	)
	for _, m := range p.cfg.Fleet.Members() {
		wg.Go(func() {
			var r heldReply
			var err error
			if m.ID == self {
				r = p.held(self, ask)
			} else {
				r, err = p.askHeld(ctx, m.ID, body)
			}
			if err != nil {
				p.log.Warn("fleet: a member did not answer which leases it holds on accounts taken over; their share is withheld until it answers or leaves",
					"member", clip(m.ID), "accounts", len(accounts), "err", err)
				mu.Lock()
				silent = append(silent, m.ID)
				mu.Unlock()
				return
			}
			n := p.adoptFrom(ctx, m.ID, r)
			mu.Lock()
			for acc, k := range n {
				counted[acc] += k
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(silent) == 0 {
		return
	}
	var withheld []*actors.Lease
	for _, acc := range accounts {
		v, ok := p.cfg.Pool.View(acc)
		if !ok {
			continue // not running here (removed, or moved away already)
		}
		for range v.MaxInFlight - counted[acc] {
			l, err := p.cfg.Pool.Adopt(ctx, acc, "")
			if err != nil {
				break
			}
			withheld = append(withheld, l)
		}
	}
	p.withheld.Add(int64(len(withheld)))
	go p.chase(body, silent, withheld)
}

// askHeld sends a heldAsk to member and decodes its answer.
func (p *Peer) askHeld(ctx context.Context, member string, body []byte) (heldReply, error) {
	var r heldReply
	out, err := p.send(ctx, member, PathHeld, body)
	if err == nil {
		if err = json.Unmarshal(out, &r); err != nil {
			p.count("malformed")
		}
	} else if errors.Is(err, errUnreachable) {
		p.count("unreachable")
	}
	return r, err
}

// chase asks the members that did not answer Adopt's ask (body) again,
// every heartbeat and when the live set changes, counting their answers,
// until each has answered or left the live set, or WithholdFor has passed;
// then it releases the leases withheld for them.
func (p *Peer) chase(body []byte, silent []string, withheld []*actors.Lease) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("fleet: asking silent members panicked", "panic", fmt.Sprint(r))
		}
		for _, l := range withheld {
			p.cfg.Pool.Release(l, actors.Outcome{Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
		}
		p.withheld.Add(-int64(len(withheld)))
	}()
	t := time.NewTicker(p.cfg.Fleet.cfg.Interval)
	defer t.Stop()
	limit := time.NewTimer(p.cfg.WithholdFor)
	defer limit.Stop()
	for len(silent) > 0 {
		changed := p.cfg.Fleet.Changed()
		select {
		case <-p.ctx.Done():
			return
		case <-limit.C:
			p.log.Warn("fleet: members that did not answer are still silent after the longest a call runs; the share withheld for them is let go",
				"members", len(silent), "after", p.cfg.WithholdFor)
			return
		case <-t.C:
		case <-changed:
		}
		live := map[string]bool{}
		for _, m := range p.cfg.Fleet.Members() {
			live[m.ID] = true
		}
		keep := silent[:0]
		for _, id := range silent {
			if !live[id] {
				p.log.Info("fleet: a member that did not answer left the live set; the share withheld for it is let go", "member", clip(id))
				continue
			}
			ctx, cancel := context.WithTimeout(p.ctx, AdoptTimeout)
			r, err := p.askHeld(ctx, id, body)
			if err == nil {
				p.adoptFrom(ctx, id, r)
				p.log.Info("fleet: a member that did not answer has answered; its leases are counted", "member", clip(id), "leases", len(r.Leases))
			} else {
				keep = append(keep, id)
			}
			cancel()
		}
		silent = keep
	}
}

// adoptFrom counts the leases holder answered (each handle once) and
// returns how many it counted on each account.
func (p *Peer) adoptFrom(ctx context.Context, holder string, r heldReply) map[string]int {
	n := map[string]int{}
	for _, hl := range r.Leases {
		p.mu.Lock()
		g := p.leases[hl.Handle]
		p.mu.Unlock()
		if g != nil && g.caller == holder {
			n[hl.Account]++ // counted at an earlier answer
			continue
		}
		l, err := p.cfg.Pool.Adopt(ctx, hl.Account, hl.Model)
		if err != nil {
			p.log.Warn("fleet: a lease held on an account taken over not counted", "account", hl.Account, "holder", clip(holder), "err", err)
			continue
		}
		now := time.Now()
		key := holder + " " + hl.Handle
		p.mu.Lock()
		_, released := p.orphans[key]
		if !released {
			p.leases[hl.Handle] = &granted{lease: l, caller: holder, model: hl.Model, at: now.Add(-hl.Age), live: now}
		}
		delete(p.orphans, key)
		p.mu.Unlock()
		if released {
			p.cfg.Pool.Release(l, actors.Outcome{Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
			continue
		}
		n[hl.Account]++
		p.adopted.Add(1)
	}
	return n
}
