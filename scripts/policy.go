package scripts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// MinRecheck is the shortest recheck_after a score may ask for; shorter
// positive values are raised to it, so a policy cannot make the scheduler
// spin re-scoring.
const MinRecheck = time.Second

// ErrorRecheck is the recheckAfter Score returns with an error: the
// scheduler should try the account again after it even if nothing changes.
const ErrorRecheck = 10 * time.Second

// Policy is a compiled routing policy with its own sandboxed Lua state.
//
// The compiled program, its name, digest, version and Knobs are immutable and
// safe to read from any goroutine. Score and Route run Lua in the policy's
// state, which is not safe for concurrent use: exactly one goroutine — the
// scheduler actor — may call them at a time. Another goroutine that needs to
// run the same policy (a scheduler shard, `troupe policy check`) uses Clone,
// which shares the compiled program and gets a state of its own.
type Policy struct {
	name    string
	source  string
	digest  string
	proto   *lua.FunctionProto
	opts    Options
	knobs   Knobs
	version uint64     // the stored version; set by Host before the policy is published
	reads   Fields     // the counter fields the source may read (Reads)
	view    viewFields // the account view's fields a fill writes up front (scanSource)
	// writeFree: no function of the source assigns to a table (writeFree),
	// so a call cannot change the view tables and a fill may trust its cells.
	writeFree bool

	sb    *sandbox
	score *lua.LFunction
	route *lua.LFunction // nil when the policy has no route
	acct  *accountTable
	req   *requestTable
	now   lua.LValue // the last `now` passed to score, boxed: a rescore's calls share one

	calls      atomic.Uint64
	errors     atomic.Uint64
	overBudget atomic.Uint64
}

// MaxSourceBytes bounds a policy's source (256 KiB): the shipped policies
// are a few KiB, and every saved version is stored and kept in the history.
const MaxSourceBytes = 256 << 10

// Compile parses and compiles source, runs its top-level chunk in a fresh
// sandbox (within Options.LoadInstructions and LoadTimeout) and reads the global `score` (required
// function), `route` (optional function) and `policy` (optional knobs table).
// opts' zero fields take their defaults. Errors are *Error values carrying
// the source line ("policy smart:12: attempt to call a nil value").
func Compile(name, source string, opts Options) (*Policy, error) {
	opts = opts.withDefaults()
	if len(source) > MaxSourceBytes {
		return nil, &Error{Policy: name, Kind: ErrSyntax, Msg: fmt.Sprintf("the source is %d bytes; a policy has at most %d", len(source), MaxSourceBytes)}
	}
	if err := checkConstants(name, source); err != nil {
		return nil, err
	}
	chunk, err := parse.Parse(strings.NewReader(source), chunkName(name))
	if err != nil {
		return nil, syntaxError(name, source, err)
	}
	proto, err := lua.Compile(chunk, chunkName(name))
	if err != nil {
		return nil, syntaxError(name, source, err)
	}
	if err := checkConcat(name, proto); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(source))
	p := &Policy{name: name, source: source, digest: hex.EncodeToString(sum[:]), proto: proto, opts: opts}
	names := scanSource(source)
	p.reads, p.view = names.reads, names.view
	p.writeFree = writeFree(proto)
	knobs, err := p.instantiate()
	if err != nil {
		return nil, err
	}
	p.knobs = knobs
	return p, nil
}

// instantiate gives p a fresh sandbox running its chunk and returns the
// knobs the chunk defined.
func (p *Policy) instantiate() (Knobs, error) {
	sb := newSandbox(p.name, p.opts)
	L := sb.L
	L.Push(L.NewFunctionFromProto(p.proto))
	sb.budget.start(p.opts.LoadInstructions, p.opts.LoadTimeout)
	err := L.PCall(0, 0, nil)
	over := sb.budget.stop()
	if err != nil {
		sb.close()
		return Knobs{}, p.callError("the top-level chunk", err, over)
	}
	G := L.G.Global
	score, ok := G.RawGetString("score").(*lua.LFunction)
	if !ok {
		sb.close()
		return Knobs{}, &Error{Policy: p.name, Kind: ErrKnobs, Msg: "no score function: define function score(account, now)"}
	}
	var route *lua.LFunction
	switch r := G.RawGetString("route").(type) {
	case *lua.LNilType:
	case *lua.LFunction:
		route = r
	default:
		sb.close()
		return Knobs{}, &Error{Policy: p.name, Kind: ErrKnobs, Msg: "route is a " + r.Type().String() + ", want a function or nil"}
	}
	var table *lua.LTable
	switch t := G.RawGetString("policy").(type) {
	case *lua.LNilType:
	case *lua.LTable:
		table = t
	default:
		sb.close()
		return Knobs{}, &Error{Policy: p.name, Kind: ErrKnobs, Msg: "policy is a " + t.Type().String() + ", want a table or nil"}
	}
	knobs, err := parseKnobs(table)
	if err != nil {
		sb.close()
		e := &Error{Policy: p.name, Kind: ErrKnobs, Msg: err.Error()}
		var ke *knobError
		if errors.As(err, &ke) && ke.knob != "" {
			e.Line = tokenLine(p.source, ke.knob)
		}
		return Knobs{}, e
	}
	sb.freezeGlobals()
	p.sb, p.score, p.route = sb, score, route
	p.acct, p.req = newAccountTable(sb, p.view, p.writeFree), newRequestTable(sb)
	return knobs, nil
}

// Clone returns an independent copy of p with its own Lua state: the same
// compiled program, name, digest, version and knobs, re-running the top-level
// chunk. Use one clone per goroutine that calls Score or Route.
func (p *Policy) Clone() (*Policy, error) {
	c := &Policy{name: p.name, source: p.source, digest: p.digest, proto: p.proto, opts: p.opts, knobs: p.knobs, version: p.version, reads: p.reads, view: p.view, writeFree: p.writeFree}
	if _, err := c.instantiate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Close releases the policy's Lua state. It is optional (an unreachable
// Policy is collected), and Score and Route must not be called after it.
func (p *Policy) Close() { p.sb.close() }

// Name is the policy's name, as given to Compile.
func (p *Policy) Name() string { return p.name }

// Source is the Lua source the policy was compiled from.
func (p *Policy) Source() string { return p.source }

// Digest is the hex SHA-256 of the source, a stable identity for traces and caches.
func (p *Policy) Digest() string { return p.digest }

// Version is the stored version (storage.PolicyVersion.Version, the number
// the admin API lists and activates) the policy was loaded from; 0 when its
// source is not a stored version (a file in policies.dir, a built-in loaded
// at start) or it was compiled outside a Host. How many loads the Host did is
// ReloadStatus.Loads, a different number.
func (p *Policy) Version() uint64 { return p.version }

// Knobs returns a copy of the policy's static settings; its TieBreak slice
// is shared and must not be modified.
func (p *Policy) Knobs() Knobs { return p.knobs }

// HasRoute reports whether the policy defines route; without it Route is a
// no-op and callers may skip it.
func (p *Policy) HasRoute() bool { return p.route != nil }

// Stats are a policy's call counters, readable from any goroutine.
type Stats struct {
	Calls      uint64 // score and route calls
	Errors     uint64 // calls that failed: runtime errors, budget, bad results
	OverBudget uint64 // the failed calls that the budget stopped
}

// Stats returns the call counters.
func (p *Policy) Stats() Stats {
	return Stats{Calls: p.calls.Load(), Errors: p.errors.Load(), OverBudget: p.overBudget.Load()}
}

// Score runs score(account, now) for a. It returns ok=false when the policy
// excludes the account (score nil or false); tier is TierHealthy when the
// policy returns none; recheckAfter is 0 when the policy asks for no recheck,
// else at least MinRecheck — it may be set with ok=false too, when the
// exclusion itself expires.
//
// A runtime error, a call over its budget (Options.ScoreInstructions,
// Options.ScoreTimeout) or a malformed result yields ok=false,
// recheckAfter=ErrorRecheck and an *Error, counted in Stats; Score never
// panics. Score does not retain a. Not safe for concurrent use (see Policy).
func (p *Policy) Score(a *AccountView, now time.Time) (score float64, ok bool, tier Tier, recheckAfter time.Duration, err error) {
	p.calls.Add(1)
	L := p.sb.L
	defer func() {
		if r := recover(); r != nil {
			p.sb.budget.stop()
			L.SetTop(0)
			score, ok, tier, recheckAfter = 0, false, 0, ErrorRecheck
			err = &Error{Policy: p.name, Kind: ErrRuntime, Msg: fmt.Sprint("host panic: ", r)}
			p.errors.Add(1)
		}
	}()
	L.Push(p.score)
	L.Push(p.acct.fill(a))
	if n, ok := p.now.(lua.LNumber); !ok || float64(n) != unixSeconds(now) {
		p.now = p.sb.nums.value(unixSeconds(now))
	}
	L.Push(p.now)
	p.sb.budget.start(p.opts.ScoreInstructions, p.opts.ScoreTimeout)
	perr := L.PCall(2, 3, nil)
	over := p.sb.budget.stop()
	if perr != nil {
		p.countError(over)
		return 0, false, 0, ErrorRecheck, p.callError("score", perr, over)
	}
	sv, tv, rv := L.Get(-3), L.Get(-2), L.Get(-1)
	L.Pop(3)
	score, ok, tier, recheckAfter, err = p.scoreResult(sv, tv, rv)
	if err != nil {
		p.errors.Add(1)
		return 0, false, 0, ErrorRecheck, err
	}
	return score, ok, tier, recheckAfter, nil
}

func (p *Policy) scoreResult(sv, tv, rv lua.LValue) (float64, bool, Tier, time.Duration, error) {
	var score float64
	ok := true
	switch v := sv.(type) {
	case lua.LNumber:
		score = float64(v)
		if math.IsNaN(score) || math.IsInf(score, 0) {
			return 0, false, 0, 0, resultError(p.name, p.score, "score returned %v, want a finite number", score)
		}
	case *lua.LNilType:
		ok = false
	case lua.LBool:
		if v {
			return 0, false, 0, 0, resultError(p.name, p.score, "score returned true, want a number, nil or false")
		}
		ok = false
	default:
		return 0, false, 0, 0, resultError(p.name, p.score, "score returned a %s, want a number, nil or false", sv.Type())
	}
	var tier Tier
	switch v := tv.(type) {
	case *lua.LNilType:
	case lua.LString:
		t, known := ParseTier(string(v))
		if !known {
			return 0, false, 0, 0, resultError(p.name, p.score, "score returned tier %q, want \"healthy\", \"warm\", \"risky\" or nil", string(v))
		}
		tier = t
	default:
		return 0, false, 0, 0, resultError(p.name, p.score, "score returned a %s as tier, want a string or nil", tv.Type())
	}
	var recheck time.Duration
	switch v := rv.(type) {
	case *lua.LNilType:
	case lua.LNumber:
		s := float64(v)
		if math.IsNaN(s) || s < 0 || math.IsInf(s, 0) {
			return 0, false, 0, 0, resultError(p.name, p.score, "score returned recheck_after %v, want a non-negative number of seconds", s)
		}
		if s > 0 {
			recheck = max(MinRecheck, time.Duration(min(s, 365*24*3600)*float64(time.Second)))
		}
	default:
		return 0, false, 0, 0, resultError(p.name, p.score, "score returned a %s as recheck_after, want a number or nil", rv.Type())
	}
	if !ok {
		tier = 0
	}
	return score, ok, tier, recheck, nil
}

// RouteResult is what route(request) asked for. Zero fields ask nothing:
// an empty string is no constraint, nil Tags no tag filter, 0 MaxAttempts the
// default. Constraints narrow the candidates the API key may already use;
// they never widen them.
type RouteResult struct {
	Group     string   // group: only accounts of this group
	Provider  string   // provider: only accounts of this provider
	Model     string   // model: route as if the request asked for this model
	Tags      []string // tags: only accounts carrying every one of these tags
	StickyKey string   // sticky_key: requests with the same key keep their account while it is available
	// MaxAttempts is the number of upstream attempts for this request,
	// failovers included (max_attempts, 1–20).
	MaxAttempts int
}

// Route runs route(request) for r. Without a route function it returns a
// zero RouteResult at no cost. A runtime error, a call over its budget
// (Options.RouteInstructions, RouteTimeout) or a malformed result returns an *Error (counted in
// Stats); the caller should then route without constraints. Route does not
// retain r. Not safe for concurrent use (see Policy).
func (p *Policy) Route(r *RequestView) (res RouteResult, err error) {
	if p.route == nil {
		return RouteResult{}, nil
	}
	p.calls.Add(1)
	L := p.sb.L
	defer func() {
		if rec := recover(); rec != nil {
			p.sb.budget.stop()
			L.SetTop(0)
			res, err = RouteResult{}, &Error{Policy: p.name, Kind: ErrRuntime, Msg: fmt.Sprint("host panic: ", rec)}
			p.errors.Add(1)
		}
	}()
	L.Push(p.route)
	L.Push(p.req.fill(r))
	p.sb.budget.start(p.opts.RouteInstructions, p.opts.RouteTimeout)
	perr := L.PCall(1, 1, nil)
	over := p.sb.budget.stop()
	if perr != nil {
		p.countError(over)
		return RouteResult{}, p.callError("route", perr, over)
	}
	v := L.Get(-1)
	L.Pop(1)
	res, err = p.routeResult(v)
	if err != nil {
		p.errors.Add(1)
		return RouteResult{}, err
	}
	return res, nil
}

func (p *Policy) routeResult(v lua.LValue) (RouteResult, error) {
	var res RouteResult
	switch v.(type) {
	case *lua.LNilType:
		return res, nil
	case *lua.LTable:
	default:
		return res, resultError(p.name, p.route, "route returned a %s, want a table or nil", v.Type())
	}
	var err error
	str := func(name string, v lua.LValue) string {
		s, ok := v.(lua.LString)
		if !ok && err == nil {
			err = resultError(p.name, p.route, "route result %s is a %s, want a string", name, v.Type())
		}
		return string(s)
	}
	v.(*lua.LTable).ForEach(func(k, v lua.LValue) {
		if err != nil {
			return
		}
		switch k.String() {
		case "group":
			res.Group = str("group", v)
		case "provider":
			res.Provider = str("provider", v)
		case "model":
			res.Model = str("model", v)
		case "sticky_key":
			res.StickyKey = str("sticky_key", v)
		case "tags":
			t, ok := v.(*lua.LTable)
			if !ok {
				err = resultError(p.name, p.route, "route result tags is a %s, want a list of strings", v.Type())
				return
			}
			n := t.Len()
			res.Tags = make([]string, 0, n)
			for i := 1; i <= n; i++ {
				res.Tags = append(res.Tags, str("tags element", t.RawGetInt(i)))
			}
		case "max_attempts":
			n, ok := v.(lua.LNumber)
			if !ok || float64(n) != math.Trunc(float64(n)) || n < 1 || n > 20 {
				err = resultError(p.name, p.route, "route result max_attempts is %s, want an integer in [1, 20]", v.String())
				return
			}
			res.MaxAttempts = int(n)
		default:
			err = resultError(p.name, p.route, "route result has unknown field %s (known: group, provider, model, tags, sticky_key, max_attempts)", fieldName(k))
		}
	})
	if err != nil {
		return RouteResult{}, err
	}
	return res, nil
}

// callError converts a failed PCall of what; over is why the budget
// stopped the call, nil when it did not.
func (p *Policy) callError(what string, err error, over error) *Error {
	e := runtimeError(p.name, err)
	if over != nil {
		e.Kind = ErrBudget
		e.Msg = what + " stopped: " + strings.TrimPrefix(over.Error(), ErrBudget.Error()+": ")
	}
	return e
}

func (p *Policy) countError(over error) {
	p.errors.Add(1)
	if over != nil {
		p.overBudget.Add(1)
	}
}
