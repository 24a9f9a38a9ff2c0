package scripts

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// HostOptions configure a Host.
type HostOptions struct {
	// Options are the sandbox limits of every policy the host compiles.
	Options Options
	// Sample returns a sample of the live pool for self-tests. It is called
	// from Load's goroutine and must be safe there (e.g. read the accounts'
	// published snapshots). Nil: self-tests use the synthetic views only.
	Sample func() []AccountView
	// Install, when set, readies each policy that passed compile and
	// self-test for service: it does whatever may fail and returns commit,
	// which must not fail. The host then makes the policy active, records
	// it, and calls commit; when Install returns an error instead, nothing
	// changes (the last good policy keeps serving) and the load fails with
	// that error. Both run on the loading goroutine with the load lock held,
	// in load order, must be quick and must not call back into the host.
	// The routing runtime (package routing) uses it to put the policy into
	// the scheduler and the router together, so the host never reports a
	// policy that does not run, and a scheduler running a policy implies
	// the host reports it.
	Install func(*Policy) (commit func(), err error)
	// Log receives one line per reload attempt. Nil discards.
	Log *slog.Logger
}

// ReloadStatus describes the host's last reload attempt and the serving
// policy, for the admin API, logs and metrics. It is a value.
//
// In JSON (the admin API) the fields are snake_case, as the rest of the
// admin API, and Took is took_ms.
type ReloadStatus struct {
	OK     bool          `json:"ok"`     // the last attempt succeeded (or found the source unchanged)
	Name   string        `json:"name"`   // the policy the last attempt loaded
	Digest string        `json:"digest"` // its source digest
	At     time.Time     `json:"at"`     // when the last attempt finished
	Took   time.Duration `json:"-"`      // compile plus self-test time of the last attempt
	Error  string        `json:"error"`  // the last attempt's error, "" when OK
	Line   int           `json:"line"`   // the source line of Error, 0 when unknown

	Active  string `json:"active"`  // the serving policy's name, "" before the first success
	Version uint64 `json:"version"` // the serving policy's stored version (Policy.Version); 0 before the first success or when not stored

	Loads    uint64 `json:"loads"`    // reload attempts since the host started
	Failures uint64 `json:"failures"` // failed attempts since the host started
}

// MarshalJSON writes s with Took as took_ms (milliseconds, fractional).
func (s ReloadStatus) MarshalJSON() ([]byte, error) {
	type plain ReloadStatus
	return json.Marshal(struct {
		plain
		TookMS float64 `json:"took_ms"`
	}{plain(s), float64(s.Took) / float64(time.Millisecond)})
}

// Host holds the active compiled policy and reloads it: Load compiles the
// new source in a fresh Lua state, self-tests it, and swaps it in atomically
// only if both pass; on any failure the last good policy keeps serving and
// the error, with its line, is returned and kept in Status. Host is safe for
// concurrent use; loads are serialized.
//
// The Policy that Active returns is shared: its metadata may be read
// anywhere, but only the scheduler actor may call its Score and Route (see
// Policy); a Load never touches a policy after publishing it.
type Host struct {
	opts   HostOptions
	mu     sync.Mutex // serializes Load; guards loads, failures
	active atomic.Pointer[Policy]
	status atomic.Pointer[ReloadStatus]

	loads, failures uint64
}

// NewHost returns a host with no active policy.
func NewHost(opts HostOptions) *Host {
	h := &Host{opts: opts}
	h.status.Store(&ReloadStatus{})
	return h
}

// Active returns the serving policy, or nil before the first successful Load.
func (h *Host) Active() *Policy { return h.active.Load() }

// Status returns the last reload attempt's outcome and the serving policy.
func (h *Host) Status() ReloadStatus { return *h.status.Load() }

// Load is LoadVersion with version 0: a source that is not a stored policy
// version (a file in policies.dir, a built-in).
func (h *Host) Load(name, source string) (*Policy, error) { return h.LoadVersion(name, source, 0) }

// LoadVersion compiles source as policy name, self-tests it against the
// synthetic views and HostOptions.Sample, and makes it the active policy
// under version, its stored version (storage.PolicyVersion.Version; 0 when
// not stored). If name, source and version equal the active policy's,
// nothing is swapped and the active policy is returned. On failure the
// active policy is unchanged and the error (wrapping an *Error with the
// line) is returned.
func (h *Host) LoadVersion(name, source string, version uint64) (*Policy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loads++
	start := time.Now()
	cur := h.active.Load()

	if cur != nil && cur.name == name && cur.source == source && cur.version == version {
		failedBefore := !h.status.Load().OK && h.status.Load().Error != ""
		h.record(&ReloadStatus{OK: true, Name: name, Digest: cur.digest, Took: time.Since(start)}, cur)
		if failedBefore && h.opts.Log != nil { // the source is back to what serves: say the failure is over
			h.opts.Log.Info("policy source is the serving policy again", "policy", name, "version", version, "digest", cur.digest[:12])
		}
		return cur, nil
	}
	p, err := Compile(name, source, h.opts.Options)
	if err == nil {
		var sample []AccountView
		if h.opts.Sample != nil {
			sample = h.opts.Sample()
		}
		if err = SelfTest(p, sample); err != nil {
			p.Close()
		}
	}
	took := time.Since(start)
	if err != nil {
		h.failed(name, err, took, cur)
		return nil, err
	}
	p.version = version
	commit, err := h.ready(p)
	if err != nil {
		p.Close()
		h.failed(name, err, took, cur)
		return nil, err
	}
	h.active.Store(p)
	h.record(&ReloadStatus{OK: true, Name: name, Digest: p.digest, Took: took}, p)
	commit()
	if h.opts.Log != nil {
		h.opts.Log.Info("policy loaded", "policy", name, "version", p.version, "digest", p.digest[:12], "took", took)
	}
	return p, nil
}

// ready runs HostOptions.Install for p; without one, commit does nothing.
// h.mu is held.
func (h *Host) ready(p *Policy) (commit func(), err error) {
	if h.opts.Install == nil {
		return func() {}, nil
	}
	return h.opts.Install(p)
}

// failed records a reload of name that failed with err after took, cur
// serving on: in the status, the counters and the log. h.mu is held.
func (h *Host) failed(name string, err error, took time.Duration, cur *Policy) {
	h.failures++
	st := &ReloadStatus{Name: name, Took: took, Error: err.Error()}
	var pe *Error
	if errors.As(err, &pe) {
		st.Line = pe.Line
	}
	h.record(st, cur)
	if h.opts.Log != nil {
		h.opts.Log.Warn("policy reload failed; the previous policy keeps serving", "policy", name, "err", err, "took", took)
	}
}

// refuse records a reload of pe.Policy refused before it was compiled (a
// file over MaxSourceBytes, ReadSource), as LoadVersion records a failure.
func (h *Host) refuse(pe *Error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loads++
	h.failed(pe.Policy, pe, 0, h.active.Load())
}

// LoadBuiltin loads the shipped policy name (see Builtins).
func (h *Host) LoadBuiltin(name string) (*Policy, error) {
	src, ok := Builtin(name)
	if !ok {
		return nil, fmt.Errorf("policy %q: no such built-in policy", name)
	}
	return h.Load(name, src)
}

// record publishes st, completed with the counters and the serving policy.
func (h *Host) record(st *ReloadStatus, serving *Policy) {
	st.At = time.Now()
	st.Loads, st.Failures = h.loads, h.failures
	if serving != nil {
		st.Active, st.Version = serving.name, serving.version
	}
	h.status.Store(st)
}
