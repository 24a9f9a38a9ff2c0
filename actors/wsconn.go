package actors

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/fasthttp/websocket"
	"github.com/troupe-gw/troupe/upstream"
)

// wsDialTimeout bounds one upstream WebSocket dial, TCP to upgrade.
const wsDialTimeout = 30 * time.Second

// wsSink is where one response's frames go: the caller (System.ResponseWS
// and the WSResponse it returns) reads them. The connection's reader goroutine
// writes to it; done tells the reader the caller left.
type wsSink struct {
	ready chan wsReady  // one: the upgrade's response headers, or why there is none
	ch    chan []byte   // the response's text frames, terminal frame included
	errc  chan error    // one: the read error that ended the response early
	done  chan struct{} // closed by the caller when it stops reading
	once  sync.Once
}

// wsReady is the outcome of getting a connection ready for a response.
type wsReady struct {
	header http.Header        // the upgrade response's headers
	resp   *upstream.Response // a refused upgrade: the upstream's status and body
	err    error              // a dial failure
}

func newSink() *wsSink {
	return &wsSink{ready: make(chan wsReady, 1), ch: make(chan []byte, 64), errc: make(chan error, 1), done: make(chan struct{})}
}

func (k *wsSink) fail(err error) {
	select {
	case k.errc <- err:
	default:
	}
}

func (k *wsSink) leave() { k.once.Do(func() { close(k.done) }) }

// wsConnConfig is what a wsconn actor starts with.
type wsConnConfig struct {
	dialer upstream.WebSocketDialer
	header http.Header // client headers for the upgrade
	pool   *actor.PID
	idle   time.Duration // close after this long without a response
	log    *slog.Logger
}

// wsConn is the actor that owns one upstream Responses WebSocket: it dials,
// carries one response at a time and closes when idle or broken. Its I/O runs
// on goroutines it owns (dial, reader, writer), which report back as
// messages; Receive never blocks on the network.
type wsConn struct {
	cfg     wsConnConfig
	self    *actor.PID
	engine  *actor.Engine
	conn    *websocket.Conn
	header  http.Header
	cur     atomic.Pointer[wsSink] // the response in flight; shared with the reader goroutine
	pending *wscSend               // a send waiting for the dial
	writes  chan []byte            // to the writer goroutine
	last    string                 // id of the last response completed on this connection
	busy    bool
	closed  bool
	idleGen uint64
	idleT   *time.Timer
	cancel  context.CancelFunc // cancels a dial in progress
}

func newWSConn(cfg wsConnConfig) actor.Producer {
	return func() actor.Receiver { return &wsConn{cfg: cfg} }
}

// Receive handles wsconn messages.
func (w *wsConn) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		w.self, w.engine = c.PID(), c.Engine()
	case actor.Stopped:
		w.shut()
	case wscSend:
		w.send(c, m)
	case wscDialed:
		w.dialed(c, m)
	case wscRelease:
		w.cur.Store(nil)
		if !m.clean || w.closed {
			// The response failed or the caller left mid-response (frames of
			// it may still come): after a failed response Codex drops the
			// connection, and so do we, the upstream's state being unknown.
			w.stop(c)
			return
		}
		w.last = m.last
		w.busy = false
		w.armIdle()
	case wscBroken:
		if k := w.cur.Swap(nil); k != nil {
			k.fail(m.err)
		}
		w.stop(c)
	case wscIdleEnd:
		if m.gen == w.idleGen && !w.busy {
			c.Send(w.cfg.pool, wspIdleEnd{pid: w.self}) // the pool decides: it may have handed us out
		}
	}
}

func (w *wsConn) send(c *actor.Context, m wscSend) {
	w.busy = true
	w.idleGen++
	if w.closed {
		m.sink.ready <- wsReady{err: &upstream.Error{Kind: upstream.KindConn, Err: errors.New("upstream websocket closed")}}
		return
	}
	if w.conn == nil {
		if w.pending != nil {
			m.sink.ready <- wsReady{err: &upstream.Error{Kind: upstream.KindRequest, Err: errors.New("websocket connection busy")}}
			return
		}
		w.pending = &m
		ctx, cancel := context.WithTimeout(context.Background(), wsDialTimeout)
		w.cancel = cancel
		dialer, hdr, self, eng := w.cfg.dialer, w.cfg.header, w.self, w.engine
		go func() {
			defer cancel()
			conn, resp, err := dialer.DialWebSocket(ctx, hdr)
			if conn != nil && ctx.Err() != nil {
				_ = conn.Close() // the actor stopped while dialing; nobody will own it
				return
			}
			eng.Send(self, wscDialed{conn: conn, resp: resp, err: err})
		}()
		return
	}
	w.start(m)
}

// start puts m's response in flight on the open connection.
func (w *wsConn) start(m wscSend) {
	w.cur.Store(m.sink)
	m.sink.ready <- wsReady{header: w.header}
	w.writes <- m.frame // buffered: one response in flight, so never full
}

func (w *wsConn) dialed(c *actor.Context, m wscDialed) {
	p := w.pending
	w.pending = nil
	if m.conn == nil || m.err != nil || w.closed {
		if m.conn != nil {
			_ = m.conn.Close()
		}
		if p != nil {
			p.sink.ready <- wsReady{resp: m.resp, err: m.err}
		}
		w.stop(c)
		return
	}
	w.conn = m.conn
	if m.resp != nil {
		w.header = m.resp.Header
	}
	w.writes = make(chan []byte, 1)
	go w.writer(m.conn, w.writes)
	go w.reader(m.conn)
	if p != nil {
		w.start(*p)
	}
}

// writer sends the frames handed to it until its channel closes.
func (w *wsConn) writer(conn *websocket.Conn, frames <-chan []byte) {
	for f := range frames {
		_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if err := conn.WriteMessage(websocket.TextMessage, f); err != nil {
			w.engine.Send(w.self, wscBroken{err: &upstream.Error{Kind: upstream.KindConn, Err: err}})
			return
		}
	}
	// Closed by shut: say goodbye politely, then drop the connection.
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = conn.Close()
}

// reader delivers frames to the response in flight until the connection fails.
func (w *wsConn) reader(conn *websocket.Conn) {
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			w.engine.Send(w.self, wscBroken{err: upstream.WebSocketReadError(context.Background(), err)})
			return
		}
		if typ != websocket.TextMessage {
			continue
		}
		k := w.cur.Load()
		if k == nil {
			continue // between responses (a stray codex.rate_limits): nobody to tell
		}
		select {
		case k.ch <- data:
		case <-k.done:
		}
	}
}

func (w *wsConn) armIdle() {
	w.idleGen++
	gen, eng, self := w.idleGen, w.engine, w.self
	if w.idleT != nil {
		w.idleT.Stop()
	}
	w.idleT = time.AfterFunc(w.cfg.idle, func() { eng.Send(self, wscIdleEnd{gen: gen}) })
}

// stop closes the connection, tells the pool and stops the actor.
func (w *wsConn) stop(c *actor.Context) {
	if w.closed {
		return
	}
	w.shut()
	c.Send(w.cfg.pool, wspGone{pid: w.self})
	c.Engine().Poison(w.self)
}

// shut releases the connection's resources once; the writer goroutine does
// the closing handshake.
func (w *wsConn) shut() {
	if w.closed {
		return
	}
	w.closed = true
	if w.idleT != nil {
		w.idleT.Stop()
	}
	if w.cancel != nil {
		w.cancel()
	}
	if k := w.cur.Swap(nil); k != nil {
		k.fail(&upstream.Error{Kind: upstream.KindConn, Err: errors.New("upstream websocket closed")})
	}
	if p := w.pending; p != nil {
		w.pending = nil
		p.sink.ready <- wsReady{err: &upstream.Error{Kind: upstream.KindConn, Err: errors.New("upstream websocket closed")}}
	}
	if w.writes != nil {
		close(w.writes)
	} else if w.conn != nil {
		_ = w.conn.Close()
	}
}
