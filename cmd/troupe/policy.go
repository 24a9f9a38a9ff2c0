package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
)

// startPolicies starts the routing-policy runtime and loads the policy that
// should serve (routing.Runtime.Load): the one activated through the admin
// API, else policies.active from policies.dir or the built-ins. It fails
// when that policy does not compile, pass its self-test or install.
func (a *app) startPolicies() error {
	a.policies = routing.New(a.sys, routing.Options{
		Dir: a.cfg.Policies.Dir, Active: a.cfg.Policies.Active, Default: defaultPolicy,
		Store: a.store, Cache: a.cache, Registry: a.metrics.Registry, Log: a.log,
	})
	if err := a.policies.Load(context.Background()); err != nil {
		return fmt.Errorf("routing policy: %w", err)
	}
	a.server.SetRouting(a.policies)
	a.metrics.WatchPolicies(a.policies.Status)
	return nil
}

// watchPolicies keeps the routing policy in step until ctx ends: file
// changes in policies.dir, policies and canaries of other instances
// (routing.Runtime.Follow), and SIGHUP, which reloads the active policy. A
// failed reload keeps the last good policy serving and is logged.
func (a *app) watchPolicies(ctx context.Context) {
	a.policies.Follow(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := a.policies.Load(ctx); err != nil {
					a.log.Error("policy reload on SIGHUP failed; the previous policy keeps serving", "err", err)
				}
			}
		}
	}()
}

func policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Check, simulate and replay routing policies offline"}
	check := &cobra.Command{
		Use:   "check FILE|BUILTIN",
		Short: "Compile and self-test a policy, and show how it ranks a sample pool",
		Long: `Compile the policy (a file, or a built-in's name), run its self-test, and print
how it ranks a sample pool: 23 synthetic accounts, none of them yours, each
named for the state it stands for (fresh, busy, cooling, 429-quota, flaky,
slow, usage-exhausted, banned, …) and described in the WHAT column. The
self-test scores them all and routes sample requests; a policy that errors on
any of them is refused, as a running gateway refuses it. The ranking is how
score() orders them now: SCORE (higher is better; "excluded" for nil), TIER
and RECHECK (when a time-decayed score is computed again). To see a policy on
a pool of your size, use troupe policy simulate; on your own traffic, troupe
policy replay.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := compileFile(args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			sample := scripts.SampleViews(now)
			if err := scripts.SelfTest(p, nil); err != nil {
				return err
			}
			return printRanking(cmd.OutOrStdout(), p, sample, now)
		},
	}
	var accounts, requests, concurrency int
	var seed uint64
	var healthy bool
	simulate := &cobra.Command{
		Use:   "simulate FILE|BUILTIN",
		Short: "Run requests through the real scheduler with the policy and print where they went",
		Long: `Start the scheduler and account actors in memory with N synthetic accounts — some
healthy, some failing now and then with 5xx, 429 or timeouts, some slow (with
--all-healthy, all alike) — route M requests through them with the policy, and
print how evenly they spread (the busiest account's and the busiest 1 %'s share,
the Gini coefficient) and the distribution over accounts and tiers. Nothing
leaves the process.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := compileFile(args[0])
			if err != nil {
				return err
			}
			if accounts < 1 || requests < 1 || concurrency < 1 {
				return fmt.Errorf("--accounts, --requests and --concurrency must be at least 1")
			}
			rep, err := routing.Simulate(cmd.Context(), p, routing.SimulateOptions{Accounts: accounts, Requests: requests, Concurrency: concurrency, Seed: seed, Healthy: healthy})
			if err != nil {
				return err
			}
			return printSimulation(cmd.OutOrStdout(), rep)
		},
	}
	simulate.Flags().IntVar(&accounts, "accounts", 100, "synthetic accounts")
	simulate.Flags().IntVar(&requests, "requests", 10000, "requests to route")
	simulate.Flags().IntVar(&concurrency, "concurrency", 16, "requests in flight at once (each holds its lease about 1 ms)")
	simulate.Flags().Uint64Var(&seed, "seed", 1, "random seed for the synthetic outcomes")
	simulate.Flags().BoolVar(&healthy, "all-healthy", false, "every account healthy and alike (no failures, none slow): how the policy spreads over equal accounts")
	cmd.AddCommand(policyNewCmd(), check, simulate, replayCmd())
	return cmd
}

// compileFile compiles the policy file at path or, when there is no such
// file and path is a built-in's name ("smart"), that built-in.
func compileFile(path string) (*scripts.Policy, error) {
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	src, err := scripts.ReadSource(name, path)
	if errors.Is(err, fs.ErrNotExist) {
		if b, ok := scripts.Builtin(path); ok {
			return scripts.Compile(path, b, scripts.Options{})
		}
		err = fmt.Errorf("%w (nor is it a built-in policy: %s)", err, strings.Join(scripts.Builtins(), ", "))
	}
	if err != nil {
		return nil, err
	}
	return scripts.Compile(name, src, scripts.Options{})
}

// printRanking prints each sample view's verdict, best first.
func printRanking(w io.Writer, p *scripts.Policy, views []scripts.AccountView, now time.Time) error {
	rows, err := routing.Rank(p, views, now)
	if err != nil {
		return err
	}
	k := p.Knobs()
	fmt.Fprintf(w, "policy %s: ok (top_k %d, jitter %.2f, tiers healthy=%s warm=%s risky=%s)\n",
		p.Name(), k.TopK, k.Jitter, k.Concurrency[0], k.Concurrency[1], k.Concurrency[2])
	fmt.Fprintf(w, "counters read (a change of any other counter keeps the score): %s\n", p.Reads())
	fmt.Fprintf(w, "sample pool: %d synthetic accounts, not yours, each named for the state it stands for (WHAT); "+
		"best first. On a pool of your size: troupe policy simulate; on your traffic: troupe policy replay\n", len(views))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tACCOUNT\tSTATUS\tSCORE\tTIER\tRECHECK\tWHAT")
	for i, r := range rows {
		score, tier := fmt.Sprintf("%.2f", r.Score), r.Tier.String()
		if !r.OK {
			score, tier = "excluded", "-"
		}
		recheck := "-"
		if r.Recheck > 0 {
			recheck = r.Recheck.Round(time.Second).String()
		}
		name := r.View.Name
		if len(name) > 40 {
			name = name[:37] + "..."
		}
		status := r.View.Status
		if status == "" {
			status = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, name, status, score, tier, recheck, scripts.SampleDescription(*r.View))
	}
	return tw.Flush()
}

// printSimulation prints a simulation's distribution over accounts and
// tiers: the 10 busiest and the 10 idlest accounts when there are more
// than 20.
func printSimulation(w io.Writer, rep *routing.SimReport) error {
	fmt.Fprintf(w, "policy %s: %d requests over %d accounts, %d not served\n", rep.Policy, rep.Requests, rep.Accounts, rep.Unserved)
	fmt.Fprintf(w, "spread: %s\n", rep.Spread)
	fmt.Fprintf(w, "tiers now: healthy %d, warm %d, risky %d, excluded %d\n", rep.Tiers["healthy"], rep.Tiers["warm"], rep.Tiers["risky"], rep.Tiers["excluded"])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tREQUESTS\tSHARE\tTIER\tSCORE\tPROFILE")
	show := rep.ByAccount
	if len(show) > 20 {
		show = append(slices.Clip(show[:10]), show[len(show)-10:]...)
	}
	for _, a := range show {
		tier, score := "-", "excluded"
		if v := a.Verdict; v != nil && v.OK {
			tier, score = v.Tier.String(), fmt.Sprintf("%.1f", v.Score)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\t%s\t%s\t%s\n", a.Name, a.Requests, 100*float64(a.Requests)/float64(rep.Requests), tier, score, a.Profile)
	}
	if len(rep.ByAccount) > 20 {
		fmt.Fprintf(tw, "(%d accounts in between not shown)\n", len(rep.ByAccount)-20)
	}
	return tw.Flush()
}
