package mock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// ErrClosed is returned by Serve and Start once the fleet has been closed.
var ErrClosed = errors.New("mock: fleet closed")

// closeTimeout bounds how long Close waits for connections to finish. Open
// answers stop at once when the fleet closes, so this is only reached by
// clients that hold a connection open mid-request.
const closeTimeout = 5 * time.Second

// maxRequestBody is the largest request body accepted (and the largest a
// compressed body may expand to), in bytes.
const maxRequestBody = 64 << 20

// Config configures a Fleet.
type Config struct {
	// Accounts are the initial accounts, added as by Add.
	Accounts []Account
	// Logger receives lifecycle messages (Info) and server/connection errors
	// (Debug). Nil discards them.
	Logger *slog.Logger
}

// Fleet is a mock upstream serving many accounts on one listener. All methods
// are safe for concurrent use. A Fleet serves until Close and cannot be
// restarted.
type Fleet struct {
	log     *slog.Logger
	srv     *fasthttp.Server
	done    chan struct{} // closed by Close: answers in progress stop
	started time.Time
	idSeed  uint64
	idSeq   atomic.Uint64

	byToken sync.Map // bearer token (string) → *account; read on every request

	// raw counts connections hijacked by a fault (reset, disconnect, hang,
	// slow first token) whose handler has not returned; Close waits for them.
	raw atomic.Int64

	mu     sync.Mutex // guards the fields below; never taken on the request path
	closed bool
	lns    []net.Listener
	byName map[string]*account

	total counters // fleet-wide, including accounts since removed

	ws wsState // the Responses WebSocket mode (websocket.go)
}

// New returns a fleet with cfg.Accounts, not yet serving.
func New(cfg Config) *Fleet {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{
		log:     log,
		done:    make(chan struct{}),
		started: time.Now(),
		idSeed:  rand.Uint64(),
		byName:  make(map[string]*account, len(cfg.Accounts)),
	}
	f.srv = &fasthttp.Server{
		Handler:              f.handle,
		Name:                 "troupe-mock",
		NoDefaultContentType: true,
		MaxRequestBodySize:   maxRequestBody,
		ReadBufferSize:       8 << 10, // the largest request head: codex JWTs and turn metadata are big
		CloseOnShutdown:      true,
		Logger:               fasthttpLogger{log},
	}
	for _, a := range cfg.Accounts {
		f.Add(a)
	}
	return f
}

// Serve answers requests on ln until Close, then returns nil; it returns
// ln's error if accepting fails otherwise, and ErrClosed (closing ln) if the
// fleet is already closed. Serve may be called for several listeners.
func (f *Fleet) Serve(ln net.Listener) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		_ = ln.Close()
		return ErrClosed
	}
	f.lns = append(f.lns, ln)
	f.mu.Unlock()

	err := f.srv.Serve(ln)
	select {
	case <-f.done:
		return nil
	default:
		return err
	}
}

// Start listens on addr (a TCP host:port; use "127.0.0.1:0" in tests) and
// serves in the background. It returns the listener's address, e.g.
// "127.0.0.1:40123", to use as base URL "http://" + addr.
func (f *Fleet) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("mock: listen %s: %w", addr, err)
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		_ = ln.Close()
		return "", ErrClosed
	}
	base := ln.Addr().String()
	f.log.Info("mock fleet listening", "addr", base, "accounts", f.count())
	go func() {
		if err := f.Serve(ln); err != nil && !errors.Is(err, ErrClosed) {
			f.log.Error("mock fleet stopped serving", "addr", base, "err", err)
		}
	}()
	return base, nil
}

// Close stops the fleet: listeners close, answers in progress stop at their
// next event or wait (counted as Cancelled, or as Faults when a fault was
// firing), JSON answers still waiting get a 503, hanging faults close their
// connections, and Close returns once every connection is done (or after 5
// seconds, with an error). Calling Close again returns nil.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.done)
	lns := f.lns
	f.lns = nil
	f.mu.Unlock()

	// Close the listeners ourselves too: a Serve that has not yet handed its
	// listener to fasthttp would otherwise never return.
	for _, ln := range lns {
		_ = ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// fasthttp closes the listeners again and reports that as an error.
	if err := f.srv.ShutdownWithContext(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("mock: close: %w", err)
	}
	// Hijacked connections are no longer the server's: wait for their
	// handlers, which stop at once when done closes. Every one was counted
	// before its request handler returned, hence before Shutdown returned.
	for f.raw.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("mock: close: %d faulted connections still open", f.raw.Load())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Add adds a, or replaces the account with the same Name (the replacement
// starts with zero counters; answers in progress finish on the old one). It
// is safe while serving.
func (f *Fleet) Add(a Account) {
	acc := newAccount(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.byName[a.Name]; ok {
		f.byToken.CompareAndDelete(old.cfg.Token, old)
	}
	f.byName[a.Name] = acc
	if a.Token != "" {
		f.byToken.Store(a.Token, acc)
	}
}

// Remove removes the account named name, if any. Later requests with its
// token get 401; answers in progress finish. It is safe while serving.
func (f *Fleet) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	acc, ok := f.byName[name]
	if !ok {
		return
	}
	delete(f.byName, name)
	f.byToken.CompareAndDelete(acc.cfg.Token, acc)
}

// SetFault replaces the fault of the account named name with a copy of *fl,
// or clears it when fl is nil, and reports whether the account exists. It is
// safe while serving: requests already accepted finish with the fault they
// started with, later ones use the new one. A quota fault's reset clock
// (Fault.ResetsIn) starts now.
func (f *Fleet) SetFault(name string, fl *Fault) bool {
	f.mu.Lock()
	acc := f.byName[name]
	f.mu.Unlock()
	if acc == nil {
		return false
	}
	acc.setFault(fl, time.Now())
	return true
}

// Fault returns a copy of the current fault of the account named name, with
// the defaults filled in (Rate 1, and the kind's Delay, ResetsIn or
// RetryAfter); nil if the account has no fault or does not exist.
func (f *Fleet) Fault(name string) *Fault {
	f.mu.Lock()
	acc := f.byName[name]
	f.mu.Unlock()
	if acc == nil {
		return nil
	}
	fs := acc.fault.Load()
	if fs == nil {
		return nil
	}
	c := fs.Fault
	return &c
}

// Stats returns the counters of the account named name; the zero value if
// there is none.
func (f *Fleet) Stats(name string) AccountStats {
	f.mu.Lock()
	acc := f.byName[name]
	f.mu.Unlock()
	if acc == nil {
		return AccountStats{}
	}
	return acc.stats.snapshot()
}

// TotalStats returns the fleet-wide counters: every request to any account
// since New or the last ResetStats, including accounts removed since.
// MaxInFlight is the fleet-wide high-water mark of concurrent answers.
func (f *Fleet) TotalStats() AccountStats {
	return f.total.snapshot()
}

// ResetStats zeroes Requests, Completed, Cancelled, Faults and Rejected of every
// account and of the fleet total, and restarts each MaxInFlight at the
// current InFlight. Answers in progress are counted when they end.
func (f *Fleet) ResetStats() {
	f.mu.Lock()
	for _, acc := range f.byName {
		acc.stats.reset()
	}
	f.mu.Unlock()
	f.total.reset()
}

func (f *Fleet) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byName)
}

// lookup returns the account whose token is tok, or nil.
func (f *Fleet) lookup(tok []byte) *account {
	v, ok := f.byToken.Load(string(tok))
	if !ok {
		return nil
	}
	return v.(*account)
}

// nextID returns a fresh 32-hex-digit id suffix: the fleet's random seed and
// a sequence number.
func (f *Fleet) nextID(dst []byte) []byte {
	dst = appendHex64(dst, f.idSeed)
	return appendHex64(dst, f.idSeq.Add(1))
}

// fasthttpLogger sends fasthttp's messages to slog at Debug level.
type fasthttpLogger struct{ l *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if l.l.Enabled(context.Background(), slog.LevelDebug) {
		l.l.Debug("mock server: " + fmt.Sprintf(format, args...))
	}
}
