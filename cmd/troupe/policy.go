package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
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
		Args:  cobra.ExactArgs(1),
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
	simulate := &cobra.Command{
		Use:   "simulate FILE|BUILTIN",
		Short: "Run requests through the real scheduler with the policy and print where they went",
		Long: `Start the scheduler and account actors in memory with N synthetic accounts — some
healthy, some failing now and then with 5xx, 429 or timeouts, some slow — route M
requests through them with the policy, and print the distribution over accounts
and tiers. Nothing leaves the process.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := compileFile(args[0])
			if err != nil {
				return err
			}
			return simulatePolicy(cmd.Context(), cmd.OutOrStdout(), p, accounts, requests, concurrency, seed)
		},
	}
	simulate.Flags().IntVar(&accounts, "accounts", 100, "synthetic accounts")
	simulate.Flags().IntVar(&requests, "requests", 10000, "requests to route")
	simulate.Flags().IntVar(&concurrency, "concurrency", 16, "requests in flight at once (each holds its lease about 1 ms)")
	simulate.Flags().Uint64Var(&seed, "seed", 1, "random seed for the synthetic outcomes")
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
	type row struct {
		v       *scripts.AccountView
		score   float64
		ok      bool
		tier    scripts.Tier
		recheck time.Duration
	}
	rows := make([]row, 0, len(views))
	for i := range views {
		s, ok, tier, recheck, err := p.Score(&views[i], now)
		if err != nil {
			return fmt.Errorf("score(%s): %w", views[i].Name, err)
		}
		rows = append(rows, row{&views[i], s, ok, tier, recheck})
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		switch {
		case a.ok != b.ok:
			if a.ok {
				return -1
			}
			return 1
		case a.tier != b.tier:
			return int(a.tier) - int(b.tier)
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	k := p.Knobs()
	fmt.Fprintf(w, "policy %s: ok (top_k %d, jitter %.2f, tiers healthy=%s warm=%s risky=%s)\n",
		p.Name(), k.TopK, k.Jitter, k.Concurrency[0], k.Concurrency[1], k.Concurrency[2])
	fmt.Fprintf(w, "counters read (a change of any other counter keeps the score): %s\n", p.Reads())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tACCOUNT\tSTATUS\tSCORE\tTIER\tRECHECK")
	for i, r := range rows {
		score, tier := fmt.Sprintf("%.2f", r.score), r.tier.String()
		if !r.ok {
			score, tier = "excluded", "-"
		}
		recheck := "-"
		if r.recheck > 0 {
			recheck = r.recheck.String()
		}
		name := r.v.Name
		if len(name) > 40 {
			name = name[:37] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i+1, name, r.v.Status, score, tier, recheck)
	}
	return tw.Flush()
}

// nullUsage discards usage records (simulations record nothing).
type nullUsage struct{}

func (nullUsage) InsertUsage(context.Context, []storage.UsageRecord) error { return nil }

type simTransport struct{}

func (simTransport) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	return nil, fmt.Errorf("simulation: no upstream")
}

// simulatePolicy routes requests through a real actor system with synthetic
// outcomes: every 10th account fails half its requests with 5xx, every 7th
// one in five with a 429, every 5th is slow.
func simulatePolicy(ctx context.Context, w io.Writer, p *scripts.Policy, n, requests, concurrency int, seed uint64) error {
	if n < 1 || requests < 1 || concurrency < 1 {
		return fmt.Errorf("--accounts, --requests and --concurrency must be at least 1")
	}
	sys, err := actors.Start(actors.Config{Store: nullUsage{}, Logger: quietLogger(),
		Transport: func(storage.Account) (upstream.Transport, error) { return simTransport{}, nil }})
	if err != nil {
		return err
	}
	defer sys.Stop(context.Background())
	for i := range n {
		sys.PutAccount(storage.Account{ID: fmt.Sprintf("sim-%05d", i), Name: fmt.Sprintf("sim-%05d", i),
			Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 4})
	}
	// The scheduler owns its own clone; lp judges the final views here.
	clone, err := p.Clone()
	if err != nil {
		return err
	}
	sys.SetPolicy(actors.NewLuaPolicy(clone))
	lp := actors.NewLuaPolicy(p)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := sys.SchedulerStats(ctx)
		if err != nil {
			return err
		}
		if st.Accounts == n && st.Rescoring == 0 && st.Policy == p.Name() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simulation: scheduler did not index %d accounts", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	picks := map[string]int{}
	failed := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for wk := range concurrency {
		rng := rand.New(rand.NewPCG(seed+uint64(wk), seed^0x9e3779b97f4a7c15))
		wg.Go(func() {
			for range next {
				l, err := sys.Acquire(ctx, actors.AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 5 * time.Second})
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					continue
				}
				mu.Lock()
				picks[l.Name]++
				mu.Unlock()
				var i int
				fmt.Sscanf(l.Name, "sim-%d", &i)
				out := actors.Outcome{Status: 200, Latency: 800 * time.Millisecond, TTFT: 300 * time.Millisecond}
				switch {
				case i%10 == 0 && rng.IntN(2) == 0:
					out = actors.Outcome{Status: 500, Verdict: upstream.Verdict{Class: upstream.ClassTransient}}
				case i%7 == 0 && rng.IntN(5) == 0:
					out = actors.Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassRate, RetryAfter: 30 * time.Second}}
				case i%5 == 0:
					out.Latency, out.TTFT = 12*time.Second, 6*time.Second
				}
				time.Sleep(time.Millisecond)
				sys.Release(l, out)
			}
		})
	}
	for i := range requests {
		next <- i
	}
	close(next)
	wg.Wait()
	// Tiers as the policy judges the final views.
	tiers := map[string]int{}
	views := sys.Views()
	verdict := map[string]actors.Scored{}
	for i := range views {
		s := lp.Score(&views[i], time.Now())
		verdict[views[i].Name] = s
		if s.OK {
			tiers[s.Tier.String()]++
		} else {
			tiers["excluded"]++
		}
	}
	fmt.Fprintf(w, "policy %s: %d requests over %d accounts, %d not served\n", p.Name(), requests, n, failed)
	fmt.Fprintf(w, "tiers now: healthy %d, warm %d, risky %d, excluded %d\n", tiers["healthy"], tiers["warm"], tiers["risky"], tiers["excluded"])
	names := make([]string, 0, len(picks))
	for name := range picks {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return picks[b] - picks[a] })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tREQUESTS\tSHARE\tTIER\tSCORE\tPROFILE")
	show := names
	if len(show) > 20 {
		show = append(append([]string(nil), names[:10]...), names[len(names)-10:]...)
	}
	for _, name := range show {
		var i int
		fmt.Sscanf(name, "sim-%d", &i)
		profile := "healthy"
		switch {
		case i%10 == 0:
			profile = "50% 5xx"
		case i%7 == 0:
			profile = "20% 429"
		case i%5 == 0:
			profile = "slow"
		}
		v := verdict[name]
		tier, score := v.Tier.String(), fmt.Sprintf("%.1f", v.Score)
		if !v.OK {
			tier, score = "-", "excluded"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f%%\t%s\t%s\t%s\n", name, picks[name], 100*float64(picks[name])/float64(requests), tier, score, profile)
	}
	if len(names) > 20 {
		fmt.Fprintf(tw, "(%d accounts in between not shown)\n", len(names)-20)
	}
	return tw.Flush()
}
