package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/internal/progress"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
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
how evenly the requests spread over the accounts as served and as replayed (the
busiest account's and the busiest 1 %'s share, the Gini coefficient), the moves
between accounts, and per account the requests served and replayed. On a
terminal a progress bar follows the replay. Nothing is sent upstream and nothing
is written.`,
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
			return withExistingStore(cmd, func(ctx context.Context, _ *Config, s storage.Store) error {
				bar := replayBar{w: cmd.ErrOrStderr()}
				defer bar.Finish()
				if progress.IsTerminal(bar.w) {
					fmt.Fprintln(bar.w, "replay: reading the request log and indexing the pool…")
				}
				rep, err := routing.Replay(cmd.Context(), s, p, q, routing.ReplayOptions{Show: show, Progress: bar.step})
				if err != nil {
					return err
				}
				bar.Finish()
				return printReplay(cmd.OutOrStdout(), rep)
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

// replayBar draws a replay's progress on w when it is a terminal
// (progress.New), from its first step report, when the total is known.
type replayBar struct {
	w    io.Writer
	bar  *progress.Bar
	done int
}

// step is routing.ReplayOptions.Progress.
func (b *replayBar) step(done, total int) {
	if done == 0 {
		b.bar = progress.New(b.w, total, "replay: routing the request log")
	}
	b.bar.Add(done - b.done)
	b.done = done
}

// Finish removes the bar.
func (b *replayBar) Finish() { b.bar.Finish() }

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

// printReplay prints a replay's report: the totals, then the moves between
// accounts, the accounts' requests served and replayed (20 each at most),
// and the differing requests listed one by one.
func printReplay(w io.Writer, rep *routing.ReplayReport) error {
	total := rep.Total()
	fmt.Fprintf(w, "policy %s replayed over %d requests from %s to %s (%d accounts in the pool, %d enabled; %d failed attempts fed back)\n",
		rep.Policy, total, rep.From.UTC().Format(time.RFC3339), rep.To.UTC().Format(time.RFC3339), rep.Accounts, rep.Enabled, rep.FailuresFedBack)
	if rep.Skipped > 0 {
		fmt.Fprintf(w, "%d records skipped (no account served or tried them, or an unknown route)\n", rep.Skipped)
	}
	if rep.Failed > 0 {
		fmt.Fprintf(w, "%d of the replayed requests had failed (SERVED BY: the account that failed last)\n", rep.Failed)
	}
	if total == 0 {
		fmt.Fprintln(w, "nothing to replay in this window")
		return nil
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(total) }
	fmt.Fprintf(w, "same account: %d (%.1f%%)  different: %d (%.1f%%)  no account: %d (%.1f%%)\n",
		rep.Same, pct(rep.Same), rep.Different, pct(rep.Different), rep.UnservedRequests, pct(rep.UnservedRequests))
	if rep.Different > 0 {
		fmt.Fprintln(w, "(a policy that spreads load, as smart does, picks any of the equally good accounts: a different account is not a different verdict; compare the spreads and the moves)")
	}
	fmt.Fprintf(w, "spread as served:   %s\nspread as replayed: %s\n", rep.Served, rep.Replayed)
	for _, c := range rep.Unserved {
		fmt.Fprintf(w, "  no account, %d: %s\n", c.Requests, c.Cause)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(rep.Moves) > 0 {
		fmt.Fprintln(tw, "\nSERVED BY\tREPLAYED ON\tREQUESTS")
		for i, m := range rep.Moves {
			if i == 20 {
				fmt.Fprintf(tw, "(%d more moves)\t\t\n", len(rep.Moves)-20)
				break
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\n", m.From, m.To, m.Requests)
		}
	}
	fmt.Fprintln(tw, "\nACCOUNT\tSERVED\tREPLAYED\tCHANGE")
	for i, a := range rep.ByAccount {
		if i == 20 {
			fmt.Fprintf(tw, "(%d more accounts)\t\t\t\n", len(rep.ByAccount)-20)
			break
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%+d\n", a.Account, a.Served, a.Replayed, a.Replayed-a.Served)
	}
	if len(rep.Differences) > 0 {
		fmt.Fprintln(tw, "\nREQUEST\tAT\tMODEL\tSERVED BY\tREPLAYED ON\tSCORE TIER")
		for _, d := range rep.Differences {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.4g %s\n", d.RequestID, d.At.UTC().Format(time.RFC3339), d.Model, d.ServedBy, d.Replayed, d.Score, d.Tier)
		}
	}
	return tw.Flush()
}
