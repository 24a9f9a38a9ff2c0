package scripts

import (
	"log/slog"
	"time"
)

// Options are the sandbox limits and budgets of a policy's Lua states. The
// zero value of every field means its default (the Default… constants).
type Options struct {
	// ScoreInstructions is the budget of one score call in Lua VM
	// instructions; a call that runs more is stopped and fails with
	// ErrBudget. Instructions, unlike time, do not depend on machine load, so
	// a policy passes or fails the same way everywhere. Default
	// DefaultScoreInstructions (smart runs about 150).
	ScoreInstructions int64
	// RouteInstructions is the budget of one route call. Default DefaultRouteInstructions.
	RouteInstructions int64
	// LoadInstructions is the budget for running the policy's top-level chunk
	// (defining score, route and policy). Default DefaultLoadInstructions.
	LoadInstructions int64

	// ScoreTimeout, RouteTimeout and LoadTimeout are wall-clock backstops
	// for the same calls, for the few instructions that are slow on their own
	// (concatenating huge strings). They also bound the memory such a call
	// can allocate (about 1–1.5 MB per millisecond on one core), so they are
	// short, yet long enough that a goroutine descheduled on a loaded
	// machine is rarely cut off. The top-level chunk's is longer: it runs
	// once per reload and per clone, off the request path, and a host
	// saturated enough to deschedule the loader for 100 ms is when an
	// operator most needs a new policy to load (its instruction budget
	// still bounds its CPU). Defaults DefaultScoreTimeout,
	// DefaultRouteTimeout, DefaultLoadTimeout.
	ScoreTimeout, RouteTimeout, LoadTimeout time.Duration
	// SelfTestBudget bounds a whole SelfTest run in wall-clock time: every
	// synthetic view and request plus the pool sample. Default DefaultSelfTestBudget.
	SelfTestBudget time.Duration

	// CallStackSize is the Lua call depth limit (frames). Default DefaultCallStackSize.
	CallStackSize int
	// RegistrySize is the initial size of the Lua value stack (slots), and
	// RegistryMaxSize the size it may grow to. Defaults DefaultRegistrySize
	// and DefaultRegistryMaxSize.
	RegistrySize, RegistryMaxSize int
	// MaxStringBytes bounds a string built in one library call (string.rep,
	// string.format, string.gsub, table.concat). Default DefaultMaxStringBytes.
	MaxStringBytes int

	// Log receives print() output at debug level, with the policy's name.
	// Nil discards it.
	Log *slog.Logger
	// Seed seeds math.random of each Lua state; 0 seeds from the runtime's
	// random source. Tests set it for reproducible policies.
	Seed uint64
}

// Defaults of Options.
const (
	DefaultScoreInstructions = 200_000
	DefaultRouteInstructions = 200_000
	DefaultLoadInstructions  = 1_000_000
	DefaultScoreTimeout      = 50 * time.Millisecond
	DefaultRouteTimeout      = 50 * time.Millisecond
	DefaultLoadTimeout       = time.Second
	DefaultSelfTestBudget    = time.Second
	DefaultCallStackSize     = 200
	DefaultRegistrySize      = 1024
	DefaultRegistryMaxSize   = 64 * 1024
	DefaultMaxStringBytes    = 1 << 20
)

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.ScoreInstructions <= 0 {
		o.ScoreInstructions = DefaultScoreInstructions
	}
	if o.RouteInstructions <= 0 {
		o.RouteInstructions = DefaultRouteInstructions
	}
	if o.LoadInstructions <= 0 {
		o.LoadInstructions = DefaultLoadInstructions
	}
	if o.ScoreTimeout <= 0 {
		o.ScoreTimeout = DefaultScoreTimeout
	}
	if o.RouteTimeout <= 0 {
		o.RouteTimeout = DefaultRouteTimeout
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = DefaultLoadTimeout
	}
	if o.SelfTestBudget <= 0 {
		o.SelfTestBudget = DefaultSelfTestBudget
	}
	if o.CallStackSize <= 0 {
		o.CallStackSize = DefaultCallStackSize
	}
	if o.RegistrySize <= 0 {
		o.RegistrySize = DefaultRegistrySize
	}
	if o.RegistryMaxSize <= 0 {
		o.RegistryMaxSize = DefaultRegistryMaxSize
	}
	if o.RegistryMaxSize < o.RegistrySize {
		o.RegistryMaxSize = o.RegistrySize
	}
	if o.MaxStringBytes <= 0 {
		o.MaxStringBytes = DefaultMaxStringBytes
	}
	return o
}
