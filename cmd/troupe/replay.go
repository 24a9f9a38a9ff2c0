package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// replayCmd is `troupe policy replay FILE`.
func replayCmd() *cobra.Command {
	var since time.Duration
	var from, to string
	var limit, show int
	cmd := &cobra.Command{
		Use:   "replay FILE|BUILTIN",
		Short: "Replay the recorded request log of a time window with a policy and show where its choices differ",
		Long: `Read the request log (usage records and error events) of a time window from
storage, start the real scheduler in memory over the pool as stored now (every
enabled account, with fresh health), and route each recorded request again, in
order, with the policy in FILE: its route() with the request's model, protocol,
stream flag and API key, then its score(). The failed attempts recorded in the
window are fed to their accounts as they happened, so health evolves as it did.
Prints how many requests the policy would send to the account that served them,
the moves between accounts, and per account the requests served and replayed.
Nothing is sent upstream and nothing is written.`,
		Example: `  troupe policy replay mine.lua --since 1h
  troupe policy replay mine.lua --from 2026-12-01T08:00:00Z --to 2026-12-01T09:00:00Z --show 20`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := compileFile(args[0])
			if err != nil {
				return err
			}
			if err := scripts.SelfTest(p, nil); err != nil {
				return err
			}
			q, err := replayWindow(since, from, to, limit, time.Now())
			if err != nil {
				return err
			}
			return withConfigStore(cmd, func(ctx context.Context, _ *Config, s storage.Store) error {
				return replayPolicy(cmd.Context(), cmd.OutOrStdout(), s, p, q, show)
			})
		},
	}
	dataFlag(cmd)
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "window: the last DURATION (ignored with --from)")
	cmd.Flags().StringVar(&from, "from", "", "window start, RFC 3339")
	cmd.Flags().StringVar(&to, "to", "", "window end, RFC 3339 (default now)")
	cmd.Flags().IntVar(&limit, "limit", 100000, "most requests to replay (the oldest of the window)")
	cmd.Flags().IntVar(&show, "show", 10, "differing requests to list one by one")
	return cmd
}

// replayWindow turns the flags into a query.
func replayWindow(since time.Duration, from, to string, limit int, now time.Time) (storage.RequestLogQuery, error) {
	q := storage.RequestLogQuery{To: now, Limit: limit}
	if to != "" {
		t, err := time.Parse(time.RFC3339, to)
		if err != nil {
			return q, fmt.Errorf("--to: %w", err)
		}
		q.To = t
	}
	if from != "" {
		t, err := time.Parse(time.RFC3339, from)
		if err != nil {
			return q, fmt.Errorf("--from: %w", err)
		}
		q.From = t
	} else {
		if since <= 0 {
			return q, fmt.Errorf("--since must be positive")
		}
		q.From = q.To.Add(-since)
	}
	if !q.From.Before(q.To) {
		return q, fmt.Errorf("empty window: %s is not before %s", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	if limit < 1 || limit > storage.MaxRequestLogLimit {
		return q, fmt.Errorf("--limit must be 1 to %d", storage.MaxRequestLogLimit)
	}
	return q, nil
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

func replayClass(name string) upstream.Class {
	for c := upstream.Class(1); c.String() != "unknown"; c++ {
		if c.String() == name {
			return c
		}
	}
	return upstream.ClassTransient
}

// replayPolicy replays the window q of s's request log with p (see replayCmd).
func replayPolicy(ctx context.Context, w io.Writer, s storage.Store, p *scripts.Policy, q storage.RequestLogQuery, show int) error {
	recs, err := s.UsageRecords(ctx, q)
	if err != nil {
		return err
	}
	evq := q
	evq.Limit = storage.MaxRequestLogLimit
	events, err := s.ErrorEvents(ctx, evq)
	if err != nil {
		return err
	}
	accounts, err := s.ListAccounts(ctx)
	if err != nil {
		return err
	}
	keys, err := s.ListAPIKeys(ctx)
	if err != nil {
		return err
	}
	keyByID := make(map[string]storage.APIKey, len(keys))
	for _, k := range keys {
		keyByID[k.ID] = k
	}
	// The replay runs on the recorded time: the clock stands at the record
	// or failed attempt being replayed, so cooldowns, failure decay and
	// recheck_after last as long in the window's timeline as they did.
	var clock atomic.Int64
	first := time.Now()
	if len(recs) > 0 {
		first = recs[0].At
	}
	if len(events) > 0 && events[0].At.Before(first) {
		first = events[0].At
	}
	clock.Store(first.UnixNano())
	advance := func(t time.Time) {
		if n := t.UnixNano(); n > clock.Load() {
			clock.Store(n)
		}
	}
	sys, err := actors.Start(actors.Config{Store: nullUsage{}, Logger: quietLogger(),
		Transport: func(storage.Account) (upstream.Transport, error) { return simTransport{}, nil },
		Clock:     func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		return err
	}
	defer sys.Stop(context.Background())
	names := map[string]string{}
	enabled := 0
	for _, a := range accounts {
		names[a.ID] = a.Name
		if !a.Disabled {
			enabled++
		}
		a.Credentials = storage.Credentials{} // never needed: nothing is sent upstream
		sys.PutAccount(a)
	}
	clone, err := p.Clone()
	if err != nil {
		return err
	}
	sys.SetPolicy(actors.NewLuaPolicy(clone))
	router := scripts.NewRouter(p, 1)
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := sys.SchedulerStats(ctx)
		if err != nil {
			return err
		}
		if st.Accounts == len(accounts) && st.Rescoring == 0 && st.Policy == p.Name() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replay: the scheduler did not index %d accounts", len(accounts))
		}
		time.Sleep(5 * time.Millisecond)
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
	type move struct{ from, to string }
	var (
		same, differ, skipped, unserved int
		failed                          int // replayed requests that had failed (status >= 400)
		moves                           = map[move]int{}
		served, replayed                = map[string]int{}, map[string]int{}
		listed                          []string
		unservedBy                      = map[string]int{} // unservedCause → requests
	)
	ei := 0
	for _, r := range recs {
		// The failed attempts that happened before this request started.
		for ; ei < len(events) && !events[ei].At.After(r.At); ei++ {
			advance(events[ei].At)
			replayFailure(ctx, sys, events[ei])
		}
		advance(r.At)
		ep, ok := replayEndpoint(r.Route)
		if !ok || r.AccountID == "" {
			skipped++
			continue
		}
		k := keyByID[r.KeyID]
		req := actors.AcquireRequest{Endpoint: ep, Model: r.Model, Group: k.Group, KeyID: r.KeyID}
		if p.HasRoute() {
			res, err := router.Route(&scripts.RequestView{Model: r.Model, Protocol: r.Route, Stream: r.Stream,
				APIKey: scripts.APIKeyView{ID: k.ID, Name: k.Name, Group: k.Group}})
			if err == nil {
				if res.Group != "" && k.Group == "" {
					req.Group = res.Group
				}
				if res.Model != "" {
					req.Model = res.Model
				}
				req.Provider, req.Tags, req.StickyKey = storage.Provider(res.Provider), res.Tags, res.StickyKey
			}
		}
		served[r.AccountID]++
		l, err := sys.Acquire(ctx, req)
		if err != nil {
			unserved++
			unservedBy[unservedCause(err)]++
			moves[move{r.AccountID, ""}]++
			continue
		}
		replayed[l.AccountID]++
		if l.AccountID == r.AccountID {
			same++
		} else {
			differ++
			moves[move{r.AccountID, l.AccountID}]++
			if len(listed) < show {
				d := l.Decision.ChosenAccount()
				listed = append(listed, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%.4g %s",
					r.RequestID, r.At.UTC().Format(time.RFC3339), r.Model, name(r.AccountID), name(l.AccountID), d.Score, d.Tier))
			}
		}
		if r.Status >= 400 {
			// A failed request was routed too (to the account that failed
			// last); its failures were fed back as error events, so its
			// lease ends as nobody's fault rather than as a success.
			failed++
			sys.Release(l, actors.Outcome{Status: r.Status, Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
			continue
		}
		sys.Release(l, actors.Outcome{Status: 200, Latency: r.Latency, TTFT: r.TTFT})
	}
	for ; ei < len(events); ei++ {
		advance(events[ei].At)
		replayFailure(ctx, sys, events[ei])
	}
	total := same + differ + unserved
	fmt.Fprintf(w, "policy %s replayed over %d requests from %s to %s (%d accounts in the pool, %d enabled; %d failed attempts fed back)\n",
		p.Name(), total, q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339), len(accounts), enabled, len(events))
	if skipped > 0 {
		fmt.Fprintf(w, "%d records skipped (no account served or tried them, or an unknown route)\n", skipped)
	}
	if failed > 0 {
		fmt.Fprintf(w, "%d of the replayed requests had failed (SERVED BY: the account that failed last)\n", failed)
	}
	if total == 0 {
		fmt.Fprintln(w, "nothing to replay in this window")
		return nil
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(total) }
	fmt.Fprintf(w, "same account: %d (%.1f%%)  different: %d (%.1f%%)  no account: %d (%.1f%%)\n",
		same, pct(same), differ, pct(differ), unserved, pct(unserved))
	for _, c := range unservedCauses {
		if n := unservedBy[c]; n > 0 {
			fmt.Fprintf(w, "  no account, %d: %s\n", n, c)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(moves) > 0 {
		ms := make([]move, 0, len(moves))
		for m := range moves {
			ms = append(ms, m)
		}
		slices.SortFunc(ms, func(a, b move) int {
			if moves[a] != moves[b] {
				return moves[b] - moves[a]
			}
			return strings.Compare(a.from+a.to, b.from+b.to)
		})
		fmt.Fprintln(tw, "\nSERVED BY\tREPLAYED ON\tREQUESTS")
		for i, m := range ms {
			if i == 20 {
				fmt.Fprintf(tw, "(%d more moves)\t\t\n", len(ms)-20)
				break
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\n", name(m.from), name(m.to), moves[m])
		}
	}
	ids := make([]string, 0, len(served)+len(replayed))
	for id := range served {
		ids = append(ids, id)
	}
	for id := range replayed {
		if _, ok := served[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		if served[a]+replayed[a] != served[b]+replayed[b] {
			return served[b] + replayed[b] - served[a] - replayed[a]
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintln(tw, "\nACCOUNT\tSERVED\tREPLAYED\tCHANGE")
	for i, id := range ids {
		if i == 20 {
			fmt.Fprintf(tw, "(%d more accounts)\t\t\t\n", len(ids)-20)
			break
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%+d\n", name(id), served[id], replayed[id], replayed[id]-served[id])
	}
	if len(listed) > 0 {
		fmt.Fprintln(tw, "\nREQUEST\tAT\tMODEL\tSERVED BY\tREPLAYED ON\tSCORE TIER")
		for _, l := range listed {
			fmt.Fprintln(tw, l)
		}
	}
	return tw.Flush()
}

// replayFailure feeds one recorded failed attempt to its account, if it can
// take a lease now (a cooling or unknown account already rests).
func replayFailure(ctx context.Context, sys *actors.System, ev storage.ErrorEvent) {
	v, ok := sys.View(ev.AccountID)
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
	l, err := sys.Acquire(ctx, actors.AcquireRequest{Endpoint: ep, Model: model, Group: v.Group, Only: ev.AccountID})
	if err != nil {
		return
	}
	sys.Release(l, actors.Outcome{Status: ev.Status, Verdict: upstream.Verdict{Class: replayClass(ev.Class)}, Latency: ev.Latency})
}

// The causes of a replayed request that got no account, as the replay
// prints them under "no account" (in this order).
const (
	causeNoMatch = "no account in the pool matches it (its model, or the group, provider or tags the policy's route() chose)"
	causeResting = "every matching account was resting at that point of the replay: cooling, unauthorized or refused by score(); " +
		"the recorded failed attempts are fed back, and the cooldowns they start last as long in the window's timeline as they would have"
	causeBusy  = "every matching account was at its max_concurrency"
	causeOther = "the scheduler refused it"
)

var unservedCauses = []string{causeNoMatch, causeResting, causeBusy, causeOther}

// unservedCause names why sys.Acquire refused a replayed request.
func unservedCause(err error) string {
	switch {
	case errors.Is(err, actors.ErrNoAccount):
		return causeNoMatch
	case errors.Is(err, actors.ErrUnavailable):
		return causeResting
	case errors.Is(err, actors.ErrBusy):
		return causeBusy
	}
	return causeOther
}
