package routing

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// ReplayStore is what Replay reads (storage.Store implements it).
type ReplayStore interface {
	UsageRecords(ctx context.Context, q storage.RequestLogQuery) ([]storage.UsageRecord, error)
	ErrorEvents(ctx context.Context, q storage.RequestLogQuery) ([]storage.ErrorEvent, error)
	ListAccounts(ctx context.Context) ([]storage.Account, error)
	ListAPIKeys(ctx context.Context) ([]storage.APIKey, error)
}

// The causes of a replayed request that got no account
// (ReplayReport.Unserved), in the order reports list them.
const (
	CauseNoMatch = "no account in the pool matches it (its model, or the group, provider or tags the policy's route() chose)"
	CauseResting = "every matching account was resting at that point of the replay: cooling, unauthorized or refused by score(); " +
		"the recorded failed attempts are fed back, and the cooldowns they start last as long in the window's timeline as they would have"
	CauseBusy  = "every matching account was at its max_concurrency"
	CauseOther = "the scheduler refused it"
)

// unservedCause names why the scheduler refused a replayed request.
func unservedCause(err error) string {
	switch {
	case errors.Is(err, actors.ErrNoAccount):
		return CauseNoMatch
	case errors.Is(err, actors.ErrUnavailable):
		return CauseResting
	case errors.Is(err, actors.ErrBusy):
		return CauseBusy
	}
	return CauseOther
}

// ReplayReport is what Replay found: how the policy's choices differ from
// what served the window. Accounts are named by their names (an id with
// " (removed)" for an account no longer stored, "(none)" for no account).
type ReplayReport struct {
	Policy           string
	From, To         time.Time
	Accounts         int // in the pool as stored now
	Enabled          int
	FailuresFedBack  int // recorded failed attempts fed to their accounts
	Skipped          int // records no account served or tried, or of an unknown route
	Failed           int // replayed requests that had failed (status >= 400)
	Same, Different  int // replayed on the account that served them, or on another
	Unserved         []CauseCount
	Moves            []Move         // from the serving account to the replayed one, most first
	ByAccount        []AccountShift // most requests first
	Differences      []Difference   // the first differing requests, up to the limit asked for
	UnservedRequests int            // requests that got no account (the sum of Unserved)
	// Served and Replayed are how evenly the replayed requests spread over
	// the accounts that could serve them, as they were served and as the
	// policy routed them: the enabled accounts serving any model the
	// requests asked for (after route()), and every account that served
	// or was replayed on. Served counts every replayed request, Replayed
	// those the replay found an account for.
	Served, Replayed Spread
}

// ReplayOptions tune Replay.
type ReplayOptions struct {
	Show int // differing requests to list one by one (ReplayReport.Differences)
	// Progress, when set, is called with (0, total) once the log is read
	// and the simulation started, and then with the steps done (recorded
	// requests and failed attempts) after each; total is their number. It
	// runs on Replay's goroutine.
	Progress func(done, total int)
}

// Total is the number of requests replayed.
func (r *ReplayReport) Total() int { return r.Same + r.Different + r.UnservedRequests }

// CauseCount is how many replayed requests got no account for one cause.
type CauseCount struct {
	Cause    string // one of the Cause constants
	Requests int
}

// Move counts the requests served by one account that the replay routed
// to another ("(none)": to no account).
type Move struct {
	From, To string
	Requests int
}

// AccountShift is one account's requests served in the window and in the
// replay.
type AccountShift struct {
	Account          string
	Served, Replayed int
}

// Difference is one request the replay routed elsewhere.
type Difference struct {
	RequestID          string
	At                 time.Time
	Model              string
	ServedBy, Replayed string
	Score              float64 // the replayed choice's score and tier
	Tier               scripts.Tier
}

// Replay reads the request log of the window q from s (usage records, and
// error events: the failed attempts), starts a Sim over the pool as stored
// now routed by p, and routes every recorded request again in order: its
// route() with the request's model, protocol, stream flag and API key, then
// the scheduler. The failed attempts are fed to their accounts as they
// happened, and the Sim's clock stands at the record or failed attempt
// being replayed, so health, cooldowns, failure decay and recheck_after
// evolve on the window's timeline. At most o.Show differences are listed.
func Replay(ctx context.Context, s ReplayStore, p *scripts.Policy, q storage.RequestLogQuery, o ReplayOptions) (*ReplayReport, error) {
	in, err := readReplay(ctx, s, q)
	if err != nil {
		return nil, err
	}
	rp := &replay{in: in, show: o.Show, progress: o.Progress, moves: map[move]int{}, served: map[string]int{}, replayed: map[string]int{},
		unserved: map[string]int{}, models: map[string]bool{}}
	rp.clock.Store(in.start().UnixNano())
	sim, err := NewSim(ctx, in.accounts, p, rp.now)
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	rp.sim = sim
	rp.run(ctx)
	return rp.report(p.Name(), q), nil
}

// replayInput is what a replay reads from storage.
type replayInput struct {
	recs     []storage.UsageRecord // the requests, oldest first
	events   []storage.ErrorEvent  // the failed attempts, oldest first
	accounts []storage.Account
	keys     map[string]storage.APIKey // by id
}

// readReplay reads the window q: every failed attempt of it, and its
// requests up to q.Limit.
func readReplay(ctx context.Context, s ReplayStore, q storage.RequestLogQuery) (*replayInput, error) {
	in := &replayInput{keys: map[string]storage.APIKey{}}
	var err error
	if in.recs, err = s.UsageRecords(ctx, q); err != nil {
		return nil, err
	}
	evq := q
	evq.Limit = storage.MaxRequestLogLimit
	if in.events, err = s.ErrorEvents(ctx, evq); err != nil {
		return nil, err
	}
	if in.accounts, err = s.ListAccounts(ctx); err != nil {
		return nil, err
	}
	keys, err := s.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		in.keys[k.ID] = k
	}
	return in, nil
}

// start is when the replay's clock starts: the first request or failed
// attempt (now when there is neither).
func (in *replayInput) start() time.Time {
	first := time.Now()
	if len(in.recs) > 0 {
		first = in.recs[0].At
	}
	if len(in.events) > 0 && in.events[0].At.Before(first) {
		first = in.events[0].At
	}
	return first
}

// replay is one run of Replay: the Sim, its clock and the tallies.
type replay struct {
	in       *replayInput
	sim      *Sim
	clock    atomic.Int64 // unix nanoseconds; only moves forward
	show     int
	progress func(done, total int) // nil: none

	same, different, skipped, failed int
	moves                            map[move]int
	served, replayed                 map[string]int  // by account id
	unserved                         map[string]int  // by cause
	models                           map[string]bool // the models the replayed requests asked for
	listed                           []Difference
}

type move struct{ from, to string } // account ids; "" for none

func (rp *replay) now() time.Time { return time.Unix(0, rp.clock.Load()) }

// advance moves the clock to t unless it is already past it.
func (rp *replay) advance(t time.Time) {
	if n := t.UnixNano(); n > rp.clock.Load() {
		rp.clock.Store(n)
	}
}

// run replays every request, preceded by the failed attempts that happened
// before it started, then the failed attempts after the last one.
// It reports its progress after each step.
func (rp *replay) run(ctx context.Context) {
	ei, events := 0, rp.in.events
	total, done := len(rp.in.recs)+len(events), 0
	step := func() {
		if done++; rp.progress != nil {
			rp.progress(done, total)
		}
	}
	if rp.progress != nil {
		rp.progress(0, total)
	}
	for _, r := range rp.in.recs {
		for ; ei < len(events) && !events[ei].At.After(r.At); ei++ {
			rp.advance(events[ei].At)
			rp.feedFailure(ctx, events[ei])
			step()
		}
		rp.advance(r.At)
		rp.request(ctx, r)
		step()
	}
	for ; ei < len(events); ei++ {
		rp.advance(events[ei].At)
		rp.feedFailure(ctx, events[ei])
		step()
	}
}

// feedFailure feeds one recorded failed attempt to its account, if it can
// take a lease now (a cooling or unknown account already rests).
func (rp *replay) feedFailure(ctx context.Context, ev storage.ErrorEvent) {
	v, ok := rp.sim.View(ev.AccountID)
	if !ok {
		return
	}
	ep := translate.Responses
	if !upstream.Supports(v.Provider, ep) {
		ep = translate.Chat
	}
	model := "*"
	if len(v.Models) > 0 {
		model = v.Models[0]
	}
	l, err := rp.sim.Acquire(ctx, actors.AcquireRequest{Endpoint: ep, Model: model, Group: v.Group, Only: ev.AccountID})
	if err != nil {
		return
	}
	rp.sim.ReleaseSettled(l, actors.Outcome{Status: ev.Status, Verdict: upstream.Verdict{Class: replayClass(ev.Class)}, Latency: ev.Latency})
}

// request routes one recorded request again and tallies where it went.
func (rp *replay) request(ctx context.Context, r storage.UsageRecord) {
	ep, ok := replayEndpoint(r.Route)
	if !ok || r.AccountID == "" {
		rp.skipped++
		return
	}
	k := rp.in.keys[r.KeyID]
	acq := actors.AcquireRequest{Endpoint: ep, Model: r.Model, Group: k.Group, KeyID: r.KeyID}
	rp.sim.Route(&acq, &scripts.RequestView{Model: r.Model, Protocol: r.Route, Stream: r.Stream,
		APIKey: scripts.APIKeyView{ID: k.ID, Name: k.Name, Group: k.Group}}, k.Group)
	rp.served[r.AccountID]++
	rp.models[acq.Model] = true
	l, err := rp.sim.Acquire(ctx, acq)
	if err != nil {
		rp.unserved[unservedCause(err)]++
		rp.moves[move{r.AccountID, ""}]++
		return
	}
	rp.replayed[l.AccountID]++
	if l.AccountID == r.AccountID {
		rp.same++
	} else {
		rp.different++
		rp.moves[move{r.AccountID, l.AccountID}]++
		if len(rp.listed) < rp.show {
			d := l.Decision.ChosenAccount()
			rp.listed = append(rp.listed, Difference{RequestID: r.RequestID, At: r.At, Model: r.Model,
				ServedBy: r.AccountID, Replayed: l.AccountID, Score: d.Score, Tier: d.Tier})
		}
	}
	if r.Status >= 400 {
		// A failed request was routed too (to the account that failed
		// last); its failures were fed back as error events, so its lease
		// ends as nobody's fault rather than as a success.
		rp.failed++
		rp.sim.ReleaseSettled(l, actors.Outcome{Status: r.Status, Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
		return
	}
	rp.sim.ReleaseSettled(l, actors.Outcome{Status: 200, Latency: r.Latency, TTFT: r.TTFT})
}

// report turns the tallies into the report, naming accounts.
func (rp *replay) report(policy string, q storage.RequestLogQuery) *ReplayReport {
	names := make(map[string]string, len(rp.in.accounts))
	rep := &ReplayReport{Policy: policy, From: q.From, To: q.To, Accounts: len(rp.in.accounts), FailuresFedBack: len(rp.in.events),
		Skipped: rp.skipped, Failed: rp.failed, Same: rp.same, Different: rp.different}
	for _, a := range rp.in.accounts {
		names[a.ID] = a.Name
		if !a.Disabled {
			rep.Enabled++
		}
	}
	name := func(id string) string {
		if n, ok := names[id]; ok {
			return n
		}
		if id == "" {
			return "(none)"
		}
		return id + " (removed)"
	}
	for _, c := range []string{CauseNoMatch, CauseResting, CauseBusy, CauseOther} {
		if n := rp.unserved[c]; n > 0 {
			rep.Unserved = append(rep.Unserved, CauseCount{Cause: c, Requests: n})
			rep.UnservedRequests += n
		}
	}
	ms := make([]move, 0, len(rp.moves))
	for m := range rp.moves {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b move) int {
		if rp.moves[a] != rp.moves[b] {
			return rp.moves[b] - rp.moves[a]
		}
		return strings.Compare(a.from+a.to, b.from+b.to)
	})
	for _, m := range ms {
		rep.Moves = append(rep.Moves, Move{From: name(m.from), To: name(m.to), Requests: rp.moves[m]})
	}
	for _, id := range rp.shiftedAccounts() {
		rep.ByAccount = append(rep.ByAccount, AccountShift{Account: name(id), Served: rp.served[id], Replayed: rp.replayed[id]})
	}
	for _, d := range rp.listed {
		d.ServedBy, d.Replayed = name(d.ServedBy), name(d.Replayed)
		rep.Differences = append(rep.Differences, d)
	}
	rep.Served, rep.Replayed = rp.spreads()
	return rep
}

// spreads returns how evenly the requests spread as served and as
// replayed, over the accounts that could serve them (ReplayReport.Served).
func (rp *replay) spreads() (served, replayed Spread) {
	could := map[string]bool{}
	for _, a := range rp.in.accounts {
		if !a.Disabled && (len(a.Models) == 0 || slices.ContainsFunc(a.Models, func(m string) bool { return rp.models[m] })) {
			could[a.ID] = true
		}
	}
	for id := range rp.served {
		could[id] = true
	}
	for id := range rp.replayed {
		could[id] = true
	}
	counts := func(by map[string]int) []int {
		out := make([]int, 0, len(by))
		for _, n := range by {
			out = append(out, n)
		}
		return out
	}
	return SpreadOf(counts(rp.served), len(could)), SpreadOf(counts(rp.replayed), len(could))
}

// shiftedAccounts returns the ids of the accounts that served or were
// replayed on, most requests (served and replayed) first.
func (rp *replay) shiftedAccounts() []string {
	ids := make([]string, 0, len(rp.served)+len(rp.replayed))
	for id := range rp.served {
		ids = append(ids, id)
	}
	for id := range rp.replayed {
		if _, ok := rp.served[id]; !ok {
			ids = append(ids, id)
		}
	}
	total := func(id string) int { return rp.served[id] + rp.replayed[id] }
	slices.SortFunc(ids, func(a, b string) int {
		if total(a) != total(b) {
			return total(b) - total(a)
		}
		return strings.Compare(a, b)
	})
	return ids
}

// replayEndpoint maps a usage record's route back to its endpoint.
func replayEndpoint(route string) (translate.Protocol, bool) {
	for _, e := range []translate.Protocol{translate.Chat, translate.Responses, translate.Messages} {
		if e.Route() == route {
			return e, true
		}
	}
	return 0, false
}

// replayClass maps an error event's class name back to its class
// (transient when unknown).
func replayClass(name string) upstream.Class {
	for c := upstream.Class(1); c.String() != "unknown"; c++ {
		if c.String() == name {
			return c
		}
	}
	return upstream.ClassTransient
}
