package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
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
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// startPolicies loads the active routing policy (policies.dir/NAME.lua, or the
// built-in NAME) into a host whose every swap reaches the scheduler (a clone
// of the policy, owned by the actor) and the gateway (a router for route()).
// It fails when the active policy does not compile or pass its self-test.
func (a *app) startPolicies() error {
	a.policies = scripts.NewHost(scripts.HostOptions{
		Sample: a.policySample,
		Log:    a.log,
		OnSwap: func(p *scripts.Policy) {
			clone, err := p.Clone()
			if err != nil {
				a.log.Error("policy clone for the scheduler", "policy", p.Name(), "err", err)
				return
			}
			a.sys.SetPolicy(actors.NewLuaPolicy(clone))
			if a.server != nil {
				a.server.SetRouter(scripts.NewRouter(p, 0))
			}
		},
	})
	a.watcher = scripts.NewWatcher(a.policies, a.cfg.Policies.Dir, a.cfg.Policies.Active, a.log)
	if err := a.loadActivePolicy(context.Background()); err != nil {
		return fmt.Errorf("routing policy: %w", err)
	}
	a.server.SetPolicies(policyControl{a})
	a.metrics.WatchPolicies(a.policies.Status)
	return nil
}

// loadActivePolicy loads the policy that should serve: the one activated
// through the admin API (stored; it takes precedence), else policies.active
// from policies.dir or the built-ins.
func (a *app) loadActivePolicy(ctx context.Context) error {
	p, err := a.store.ActivePolicy(ctx)
	switch {
	case err == nil:
		a.watcher.Pause()
		if want := a.cfg.Policies.Active; want != "" && want != p.Name {
			level := slog.LevelWarn
			if want == defaultPolicy {
				level = slog.LevelInfo // the default, most likely not asked for
			}
			a.log.Log(context.Background(), level, "policies.active (--policy, TROUPE_POLICIES_ACTIVE) is not used: the policy activated through the admin API serves; activate the other one there to switch",
				"serving", p.Name, "version", p.Version, "ignored", want)
		}
		_, err = a.policies.LoadVersion(p.Name, p.Source, uint64(max(p.Version, 0)))
		return err
	case !errors.Is(err, storage.ErrNotFound):
		return err
	}
	_, err = a.watcher.Load()
	return err
}

// policyControl gives the admin API the policy host.
type policyControl struct{ a *app }

func (c policyControl) Status() scripts.ReloadStatus { return c.a.policies.Status() }

func (c policyControl) Validate(name, source string) error {
	p, err := scripts.Compile(name, source, scripts.Options{})
	if err != nil {
		return err
	}
	defer p.Close()
	return scripts.SelfTest(p, c.a.policySample())
}

// Activate loads source; from then on the stored policy serves and file
// changes in policies.dir are ignored until the next start without one.
func (c policyControl) Activate(_ context.Context, name, source string, version int) error {
	if _, err := c.a.policies.LoadVersion(name, source, uint64(max(version, 0))); err != nil {
		return err
	}
	c.a.watcher.Pause()
	return nil
}

// Prepare compiles and self-tests source as a canary under its stored version (0: a built-in).
func (c policyControl) Prepare(name, source string, version int) (*scripts.Policy, error) {
	return c.a.policies.Prepare(name, source, uint64(max(version, 0)))
}

// Install makes a prepared canary the active policy; as with Activate, file
// changes in policies.dir are ignored from then on.
func (c policyControl) Install(_ context.Context, p *scripts.Policy) error {
	c.a.policies.Install(p)
	c.a.watcher.Pause()
	return nil
}

// policySample returns up to 200 live account views for policy self-tests.
func (a *app) policySample() []scripts.AccountView {
	views := a.sys.Views()
	if len(views) > 200 {
		views = views[:200]
	}
	out := make([]scripts.AccountView, len(views))
	for i := range views {
		actors.FillAccountView(&out[i], &views[i])
	}
	return out
}

// watchPolicies reloads the active policy when its file changes (when
// policies.dir is set), on SIGHUP and when another instance activates one,
// and follows the shared canary, until ctx ends. A failed reload keeps the
// last good policy serving; the host logs the error with its line.
func (a *app) watchPolicies(ctx context.Context) {
	if a.cfg.Policies.Dir != "" {
		go func() {
			if err := a.watcher.Run(ctx); err != nil {
				a.log.Error("policy watcher stopped", "err", err)
			}
		}()
	}
	// Another instance activated a policy: load the stored active one.
	if msgs, err := a.cache.Subscribe(ctx, gateway.PolicyChannel); err == nil {
		go func() {
			for name := range msgs {
				if err := a.loadActivePolicy(ctx); err != nil {
					a.log.Error("policy broadcast: reload failed; the previous policy keeps serving", "policy", name, "err", err)
				}
			}
		}()
	} else {
		a.log.Warn("policy broadcasts unavailable", "err", err)
	}
	// A canary started, ended or promoted on another instance (or running
	// before this one started) runs here too.
	a.server.WatchCanary(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := a.loadActivePolicy(ctx); err != nil {
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
