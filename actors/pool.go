package actors

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/troupe-gw/troupe/internal/ratelog"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// TransportFactory builds an account's provider transport.
type TransportFactory func(storage.Account) (upstream.Transport, error)

// poolConfig configures the pool supervisor.
type poolConfig struct {
	scheduler *mailbox  // the scheduler's, sent to directly
	boxes     *mailPool // runs the account actors' mailboxes
	transport TransportFactory
	refresh   *refresher // nil: codex tokens are not refreshed
	snapshots *snapIndex // account ID → *snapshot; shared with System readers
	log       *slog.Logger
	now       func() time.Time
	probe     time.Duration                                    // quota probe interval (<= 0: off)
	stateLog  *ratelog.Event                                   // budget of the accounts' state-change lines (shared)
	fenced    bool                                             // run only the accounts owned (Config.Fenced; fence.go)
	open      func(sealed string) (storage.Credentials, error) // Config.Open
	states    *states                                          // Config.States (handover.go); nil: none
}

// pool is the supervisor actor that owns the set of account actors: it spawns
// them (pooled mailboxes on cfg.boxes, registered under account/<id>),
// applies configuration changes and stops removed ones; System.Stop has it
// stop them all (poolStopAll) before it stops the pool.
type pool struct {
	cfg      poolConfig
	respawns int            // accounts put back while their last actor was still stopping
	fenced   *fenced        // nil unless cfg.fenced (fence.go)
	shared   *accountShared // every account's (accountConfig)
}

func newPool(cfg poolConfig) func() mailHandler {
	return func() mailHandler {
		p := &pool{cfg: cfg,
			shared: &accountShared{
				factory:    cfg.transport,
				refresh:    cfg.refresh,
				scheduler:  cfg.scheduler,
				log:        cfg.log,
				now:        cfg.now,
				probeEvery: cfg.probe,
				stateLog:   cfg.stateLog,
				states:     cfg.states,
				names:      &interner{},
			}}
		if cfg.fenced {
			p.fenced = &fenced{configs: make(map[string]poolPut), fences: make(map[string]*Fence), draining: make(map[string]func())}
		}
		return p
	}
}

// receive handles pool messages (mailHandler).
func (p *pool) receive(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case poolPut:
		if _, owned := p.owns(m); owned || p.box(m.account.ID) != nil {
			p.put(c, m.account)
		}
	case poolRemove:
		p.forget(m.id)
		p.stop(c, m.id)
	case poolForward:
		if box := p.box(m.id); box != nil {
			c.Send(box.PID(), m.msg)
		}
	case poolRepublish:
		p.cfg.snapshots.eachMailbox(func(_ string, box *mailbox) {
			c.Send(box.PID(), accountRepublish{})
		})
	case poolStopAll:
		boxes := p.cfg.snapshots.dropMailboxes()
		stopped := make([]context.Context, 0, len(boxes))
		for _, box := range boxes {
			stopped = append(stopped, c.Engine().Poison(box.PID()))
		}
		go func() {
			for _, ctx := range stopped {
				<-ctx.Done()
			}
			close(m.done)
		}()
	default:
		p.receiveFenced(c, m)
	}
}

// stop stops account id's actor, if it runs, and drops it from the
// scheduler and the readers' snapshots.
//
// The actor may still publish views before its stop (a release, a timer
// handled before the pill): its mailbox is retired first, so the scheduler
// drops them rather than index the account again, and the removal names
// the mailbox, so that it never drops an entry a new actor for the same
// account (put back at once, as fleet ownership does) has made meanwhile.
func (p *pool) stop(c *mailCtx, id string) {
	if box := p.box(id); box != nil {
		box.retired.Store(true)
		c.Engine().Poison(box.PID())
		p.cfg.snapshots.delete(id)
		p.cfg.scheduler.send(schedRemove{id: id, box: box}, c.PID())
	}
}

func (p *pool) put(c *mailCtx, acc storage.Account) {
	// The account's config keeps acc: its base URL and models are the
	// pool's shared copies, not the ones read from storage for it.
	acc.BaseURL = p.shared.names.str(acc.BaseURL)
	acc.Models = p.shared.names.list(acc.Models)
	acc.Tags = p.shared.names.list(acc.Tags)
	unsealed := p.unseal(&acc)
	tr, err := p.cfg.transport(acc)
	if !unsealed {
		acc.Disabled = true
	} else if err != nil {
		// An account whose transport cannot be built (bad base URL, missing
		// credentials) joins the pool disabled, so operators see it.
		if p.cfg.refresh != nil && acc.Provider == storage.ProviderCodex && acc.Credentials.RefreshToken != "" && errors.Is(err, upstream.ErrMissingCredentials) {
			p.cfg.log.Info("codex account waits for its first token refresh", "account", acc.Name)
		} else {
			p.cfg.log.Warn("account transport", "account", acc.Name, "err", err)
		}
		acc.Disabled = true
	}
	if box := p.box(acc.ID); box != nil {
		c.Send(box.PID(), &accountUpdate{account: acc, transport: tr})
		return
	}
	// The config holds the account's snapshot (accountConfig.snapshot),
	// which readers find here before the actor publishes into it.
	cfg := &accountConfig{accountShared: p.shared, account: acc, transport: tr, fence: p.fenceOf(acc.ID)}
	p.cfg.snapshots.store(acc.ID, &cfg.snapshot, nil)
	// An account put back while its last actor is still stopping (removed
	// and put again at once, as fleet ownership moves do) gets a name of
	// its own: hollywood refuses a name still registered, and the new actor
	// would never start.
	name := acc.ID
	if c.Engine().Registry.GetPID("account", name) != nil {
		p.respawns++
		name = acc.ID + "#" + strconv.Itoa(p.respawns)
	}
	_, box := spawnPooled(c.Engine(), p.cfg.boxes, cfg, "account", name, p.cfg.log)
	p.cfg.snapshots.store(acc.ID, &cfg.snapshot, box)
}

// box returns the mailbox of account id's actor; nil when none runs. The
// pool keeps the mailboxes in the readers' index of snapshots (a map of
// its own was 43 bytes an account of live heap at 10,000 accounts).
func (p *pool) box(id string) *mailbox { return p.cfg.snapshots.mailbox(id) }

// unseal opens acc's credentials when it was put with them sealed (Config.Open),
// in the pool, so that only an account that runs here is decrypted. It
// reports false when they cannot be opened.
func (p *pool) unseal(acc *storage.Account) bool {
	if acc.Sealed == "" {
		return true
	}
	if p.cfg.open == nil {
		p.cfg.log.Warn("account credentials sealed and no opener: the account joins disabled", "account", acc.Name)
		return false
	}
	creds, err := p.cfg.open(acc.Sealed)
	if err != nil {
		p.cfg.log.Warn("account credentials cannot be opened: the account joins disabled", "account", acc.Name, "err", err)
		return false
	}
	acc.Credentials, acc.Sealed = creds, ""
	return true
}
