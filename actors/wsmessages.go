package actors

import (
	"net/http"

	"github.com/anthdm/hollywood/actor"
	"github.com/fasthttp/websocket"
	"github.com/troupe-gw/troupe/upstream"
)

// Messages of the upstream WebSocket family: the per-account wspool actor
// and its wsconn children (one per upstream connection). Like messages.go,
// none is exported; System.ResponseWS builds them.

// --- wspool --------------------------------------------------------------------

// wspGet asks the account's pool for a connection to carry one response:
// an idle one whose last response is prefer, else any idle one, else a new
// one while fewer than max are open (fresh: only a new one). The reply goes
// to the channel.
type wspGet struct {
	prefer string
	fresh  bool
	dialer upstream.WebSocketDialer
	header http.Header // client headers for a new connection's upgrade
	max    int
	reply  chan wspGot
}

// wspGot is the pool's answer: a connection reserved for the caller, with
// the id of the last response it carried; pid nil when every connection is
// busy and the pool is full.
type wspGot struct {
	pid    *actor.PID
	last   string
	reused bool // the connection was open before (it may have died idle)
}

// wspIdle returns a connection to the pool after a clean response (sent by
// the caller, after it told the connection).
type wspIdle struct {
	pid  *actor.PID
	last string
}

// wspGone tells the pool a connection closed (broken, refused).
type wspGone struct{ pid *actor.PID }

// wspIdleEnd is a connection's report that it has been idle for its idle
// timeout; the pool closes it unless it was handed out meanwhile.
type wspIdleEnd struct{ pid *actor.PID }

// --- wsconn --------------------------------------------------------------------

// wscSend starts one response on the connection (dialing it first when it
// has none yet): frame is the response.create text frame, sink receives the
// upgrade result, the frames and the final error.
type wscSend struct {
	frame []byte
	sink  *wsSink
}

// wscDialed is the dial goroutine's report: a connection and the upgrade's
// response, or the refused upgrade's response, or an error.
type wscDialed struct {
	conn *websocket.Conn
	resp *upstream.Response
	err  error
}

// wscBroken is the reader's or writer's report that the connection failed.
type wscBroken struct{ err error }

// wscRelease is the caller's report that it is done with the response:
// clean when it read it to a terminal event that completed it, last then
// that response's id (the connection can continue it).
type wscRelease struct {
	clean bool
	last  string
}

// wscIdleEnd is the connection's own idle timer for generation gen.
type wscIdleEnd struct{ gen uint64 }
