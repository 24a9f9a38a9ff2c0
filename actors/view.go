package actors

import (
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Status is an account's lifecycle state as its actor sees it.
type Status uint8

// Account statuses.
const (
	StatusActive       Status = iota // serving
	StatusCooling                    // resting until View.CooldownUntil
	StatusDisabled                   // disabled by the operator
	StatusUnauthorized               // credentials rejected; needs new credentials
	StatusBanned                     // deactivated upstream; out of the pool
)

var statusNames = [...]string{"active", "cooling", "disabled", "unauthorized", "banned"}

// String returns the status's metric/API name ("active", "cooling", …).
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// View is the routing-relevant state of one account, published by its actor
// on every change. A published View is never written again: the account,
// the scheduler and readers share it (each change publishes a new one), and
// the slices in it (Models, Tags) are never mutated either.
type View struct {
	ID       string
	Name     string
	Provider storage.Provider
	Group    string
	Models   []string // empty: any model
	Tags     []string
	Priority int
	Plan     string // upstream plan ("plus", "pro", …) when known

	Status Status
	// Moving is set while the account grants nothing on this instance
	// although its status allows it: it is moving to another instance, or
	// this instance's ownership lease lapsed (docs/fleet.md). It sits
	// beside Status, in the same word: a View is then 576 bytes, a size
	// class, where 584 took the 640-byte one for every copy readers make.
	Moving bool

	InFlight       int       // leases held now
	MaxInFlight    int       // the account's concurrency limit (>= 1)
	CooldownUntil  time.Time // zero unless Status is StatusCooling
	CooldownReason string    // failure class that caused the cooldown
	Probes         uint64    // quota probes sent since start (Config.QuotaProbe)

	Requests      uint64 // leases granted since start
	Successes     uint64
	Failures      uint64
	SuccessStreak int // consecutive successes (reset by a failure)
	FailureStreak int // consecutive account-level failures (reset by a success)
	// LastFailures are the times of the account's latest failures; nil
	// until its first (read them with FailedAt and TimedOutAt, which take
	// nil as no failure). Never mutated after publication: a failure
	// publishes a new one. Held behind a pointer because they are 216
	// bytes that change only on a failure, in a View every account keeps
	// and every copy readers make (issue 21); embedded, so that a View's
	// JSON (the fleet's view exchange) keeps its LastFailure and
	// LastTimeout fields.
	*LastFailures

	// Windows are the usage windows the upstream last reported (e.g. Codex's
	// 5-hour and 7-day windows); never mutated after publication.
	Windows []UsageWindow
	// ActiveLimit is the limit the upstream last applied (Codex's
	// x-codex-active-limit: "codex" for the account's own, else a limit
	// family); "" when never reported.
	ActiveLimit string
	// Credits are the account's purchased credits as last reported
	// (x-codex-credits-*); nil when never reported. Never mutated after
	// publication.
	Credits *upstream.Credits
	// Families are the account's per-model limits (families.go), by ID;
	// a used-up one rests its models only (ModelCooling).
	Families []LimitFamily

	EWMASuccess float64       // success rate in [0,1], α = 0.1
	EWMALatency time.Duration // total latency of successful requests, α = 0.1
	EWMATTFT    time.Duration // time to first token of successful streams, α = 0.1

	Version   uint64 // increases with every published change of this account
	ConfigGen uint64 // increases when routing configuration (provider, group, models) changes
}

// Available reports whether the account can take one more lease at now.
func (v *View) Available(now time.Time) bool {
	return v.InFlight < v.MaxInFlight && v.Usable(now)
}

// Usable reports whether the account takes leases by its state, whatever
// its in-flight count: active, or cooling with the cooldown over, and not
// moving to another instance.
func (v *View) Usable(now time.Time) bool {
	if v.Moving {
		return false
	}
	switch v.Status {
	case StatusActive:
		return true
	case StatusCooling:
		return !now.Before(v.CooldownUntil)
	}
	return false
}

// Serves reports whether the account serves model (an empty Models list serves any).
func (v *View) Serves(model string) bool {
	if len(v.Models) == 0 {
		return true
	}
	for _, m := range v.Models {
		if m == model {
			return true
		}
	}
	return false
}

// LastFailures are the times of an account's latest failures (View.LastFailures).
type LastFailures struct {
	// LastFailure is the time of the last failure of each class, indexed by upstream.Class.
	LastFailure [upstream.NumClasses]time.Time
	LastTimeout time.Time // the latest transient failure that was a timeout
}

// any reports whether f holds a failure time.
func (f *LastFailures) any() bool {
	for _, t := range f.LastFailure {
		if !t.IsZero() {
			return true
		}
	}
	return !f.LastTimeout.IsZero()
}

// noFailures is the LastFailures of a View without any.
var noFailures LastFailures

// failures returns v's failure times, never nil.
func (v *View) failures() *LastFailures {
	if v.LastFailures == nil {
		return &noFailures
	}
	return v.LastFailures
}

// FailedAt returns the time of the account's last failure of class c; zero
// when there was none (or c is out of range).
func (v *View) FailedAt(c upstream.Class) time.Time {
	if v.LastFailures == nil || int(c) < 0 || int(c) >= len(v.LastFailure) {
		return time.Time{}
	}
	return v.LastFailure[c]
}

// TimedOutAt returns the time of the account's latest transient failure
// that was a timeout; zero when there was none.
func (v *View) TimedOutAt() time.Time {
	if v.LastFailures == nil {
		return time.Time{}
	}
	return v.LastTimeout
}

// withFailure returns a copy of lf (nil: none) with a failure of class c
// at now; timeout sets LastTimeout too. A published View's LastFailures are
// shared and never written, so a failure gets new ones.
func withFailure(lf *LastFailures, c upstream.Class, now time.Time, timeout bool) *LastFailures {
	n := new(LastFailures)
	if lf != nil {
		*n = *lf
	}
	n.LastFailure[c] = now
	if timeout {
		n.LastTimeout = now
	}
	return n
}

// UsageWindow is one upstream usage window.
type UsageWindow struct {
	Name          string    // e.g. "5h", "7d"
	UsedPercent   float64   // 0–100 (may exceed 100)
	WindowMinutes int       // window length
	ResetsAt      time.Time // zero when unknown
	// BurnRate is how fast the window is being used, in percent per hour,
	// measured since the first report of the current window; 0 until two
	// reports at least 30 s apart show usage growing.
	BurnRate float64
	// ExhaustsAt is when the window is forecast to reach 100 % at BurnRate;
	// zero when it is not forecast to run out before it resets (or no rate
	// is known yet). A window already at 100 % has ExhaustsAt at its report.
	ExhaustsAt time.Time
}

// Indexes of View.LastFailure, by failure class.
const (
	classQuota     = int(upstream.ClassQuota)
	classRate      = int(upstream.ClassRate)
	classAuth      = int(upstream.ClassAuth)
	classBanned    = int(upstream.ClassBanned)
	classTransient = int(upstream.ClassTransient)
)

// Outcome is what a lease holder reports when it releases the lease.
type Outcome struct {
	// RequestID is the client request the lease served (Lease.RequestID),
	// named in the account's log lines; "" when unknown.
	RequestID string
	Status    int // HTTP status the upstream answered (0 if none)
	Verdict   upstream.Verdict
	Timeout   bool          // the failure was a timeout (a transient failure)
	Latency   time.Duration // lease start to last byte
	TTFT      time.Duration // lease start to first content byte (0 if none)
}

// Lease is the right to send one request through one account. It must be
// released exactly once with System.Release; releasing twice is harmless.
type Lease struct {
	ID        uint64
	AccountID string
	Name      string
	Provider  storage.Provider
	Transport upstream.Transport // the account's provider transport
	Granted   time.Time
	Decision  Decision // why the scheduler chose this account
	// RequestID is the client request the holder serves with the lease; the
	// holder may set it (before Release) for the account's log lines.
	RequestID string
	pid       *actor.PID
	box       *mailbox     // the account's mailbox, which the release goes to
	remote    *remoteLease // set when another instance granted the lease (remote.go)
	released  atomic.Bool
}

var canceledVerdict = upstream.Verdict{Class: upstream.ClassCanceled}
