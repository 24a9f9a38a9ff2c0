package actors

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/upstream"
)

// wsPoolConfig is what an account's wspool actor starts with.
type wsPoolConfig struct {
	idle time.Duration // a connection's idle close
	log  *slog.Logger
}

// wsPool is the actor that keeps one account's upstream WebSocket
// connections (its wsconn children): at most the account's concurrency of
// them, each reserved by one response at a time. It never touches a
// connection itself.
type wsPool struct {
	cfg    wsPoolConfig
	dialer upstream.WebSocketDialer // the account's current transport
	conns  map[string]*wsEntry      // child ID → entry
	seq    uint64
}

type wsEntry struct {
	pid  *actor.PID
	idle bool
	last string // last response completed on it
	used time.Time
}

func newWSPool(cfg wsPoolConfig) actor.Producer {
	return func() actor.Receiver { return &wsPool{cfg: cfg, conns: make(map[string]*wsEntry)} }
}

// Receive handles wspool messages.
func (p *wsPool) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case wspGet:
		m.reply <- p.get(c, m)
	case wspIdle:
		if e := p.conns[m.pid.ID]; e != nil {
			e.idle, e.last, e.used = true, m.last, time.Now()
		}
	case wspGone:
		delete(p.conns, m.pid.ID)
	case wspIdleEnd:
		if e := p.conns[m.pid.ID]; e != nil && e.idle {
			delete(p.conns, m.pid.ID)
			c.Engine().Poison(e.pid)
		}
	}
}

func (p *wsPool) get(c *actor.Context, m wspGet) wspGot {
	if p.dialer != m.dialer {
		// New credentials (or the first call): connections dialed with the
		// old ones are closed once idle; busy ones finish their response.
		for id, e := range p.conns {
			if e.idle {
				c.Engine().Poison(e.pid)
				delete(p.conns, id)
			}
		}
		p.dialer = m.dialer
	}
	var pick *wsEntry
	for _, e := range p.conns {
		if !e.idle || m.fresh {
			continue
		}
		if m.prefer != "" && e.last == m.prefer {
			pick = e
			break
		}
		if pick == nil || e.used.After(pick.used) {
			pick = e
		}
	}
	if pick == nil {
		if len(p.conns) >= max(m.max, 1) {
			return wspGot{}
		}
		p.seq++
		pid := c.SpawnChild(newWSConn(wsConnConfig{
			dialer: m.dialer, header: m.header, pool: c.PID(), idle: p.cfg.idle, log: p.cfg.log,
		}), "wsconn", actor.WithID(strconv.FormatUint(p.seq, 10)))
		pick = &wsEntry{pid: pid}
		p.conns[pid.ID] = pick
		return wspGot{pid: pid}
	}
	pick.idle = false
	return wspGot{pid: pick.pid, last: pick.last, reused: true}
}
