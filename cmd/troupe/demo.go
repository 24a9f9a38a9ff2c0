package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
)

// Demo pool: account i is, by i mod 4, a codex account serving
// demoCodexModel (1), an openai account serving demoOpenAIModel (2), an
// anthropic account serving demoAnthropicModel (3) or an openai_compat
// account serving demoCompatModel (0), so that every client protocol can
// reach every provider.
const (
	demoCodexModel     = "gpt-5.5"
	demoOpenAIModel    = "gpt-4.1-mini"
	demoAnthropicModel = "claude-sonnet-4-5"
	demoCompatModel    = "qwen3-32b"
)

// demoAccounts returns n mock fleet accounts (demo-0001 …) and their pool entries.
func demoAccounts(n int, mockAddr string) ([]mock.Account, []storage.Account) {
	fleet := make([]mock.Account, 0, n)
	pool := make([]storage.Account, 0, n)
	for i := 1; i <= n; i++ {
		ma, sa := demoAccount(i, mockAddr)
		fleet = append(fleet, ma)
		pool = append(pool, sa)
	}
	return fleet, pool
}

// demoProvider returns the provider of demo account number i (see the
// demo pool above).
func demoProvider(i int) storage.Provider {
	switch i % 4 {
	case 1:
		return storage.ProviderCodex
	case 2:
		return storage.ProviderOpenAI
	case 3:
		return storage.ProviderAnthropic
	}
	return storage.ProviderOpenAICompat
}

// demoAccount returns demo account number i (demo-%04d) of provider
// demoProvider(i): its mock fleet entry and its pool entry.
func demoAccount(i int, mockAddr string) (mock.Account, storage.Account) {
	return demoAccountAs(i, demoProvider(i), mockAddr)
}

// demoAccountAs returns demo account number i as an account of provider p
// serving that provider's demo model.
func demoAccountAs(i int, p storage.Provider, mockAddr string) (mock.Account, storage.Account) {
	name := fmt.Sprintf("demo-%04d", i)
	token := "mock-token-" + name
	ma := mock.Account{Name: name, Token: token, Latency: 30 * time.Millisecond, TokensPerSecond: 200, OutputTokens: 12}
	sa := storage.Account{Name: name, MaxConcurrency: defaultMaxConcurrency, Group: "", Provider: p}
	switch p {
	case storage.ProviderCodex:
		ma.Kind, ma.Models = mock.KindCodex, []string{demoCodexModel}
		ma.ChatGPTAccountID = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		sa.BaseURL = "http://" + mockAddr + "/backend-api/codex"
		sa.Credentials = storage.Credentials{AccessToken: token, AccountID: ma.ChatGPTAccountID}
	case storage.ProviderAnthropic:
		ma.Kind, ma.Models = mock.KindAnthropic, []string{demoAnthropicModel}
		sa.BaseURL = "http://" + mockAddr // like ANTHROPIC_BASE_URL: no /v1
		sa.Credentials = storage.Credentials{APIKey: token}
	case storage.ProviderOpenAICompat:
		ma.Kind, ma.Models = mock.KindOpenAICompat, []string{demoCompatModel}
		sa.BaseURL = "http://" + mockAddr + "/v1"
		sa.Credentials = storage.Credentials{APIKey: token}
	default:
		ma.Kind, ma.Models = mock.KindOpenAI, []string{demoOpenAIModel}
		sa.Provider = storage.ProviderOpenAI
		sa.BaseURL = "http://" + mockAddr + "/v1"
		sa.Credentials = storage.Credentials{APIKey: token}
	}
	sa.Models = ma.Models
	return ma, sa
}

// syncDemoAccounts makes the stored pool exactly pa: the demo owns its data
// directory, so accounts left by an earlier, larger demo (pointing at a mock
// fleet that is gone) are removed.
func syncDemoAccounts(ctx context.Context, store storage.Store, pa []storage.Account) error {
	keep := make(map[string]bool, len(pa))
	for _, a := range pa {
		if _, err := store.PutAccount(ctx, a); err != nil {
			return err
		}
		keep[a.Name] = true
	}
	stored, err := store.ListAccounts(ctx)
	if err != nil {
		return err
	}
	for _, a := range stored {
		if !keep[a.Name] {
			if err := store.DeleteAccount(ctx, a.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// demo is a running demo: the mock fleet and a gateway in front of it.
type demo struct {
	fleet  *mock.Fleet
	app    *app
	apiKey string
	// mockAddr is the mock fleet's host:port (a random port), printed so
	// that accounts of one's own can point at it (docs/mock.md).
	mockAddr string
	// adminPassword is the admin user's password, set anew at every demo
	// start (admin.password, or random).
	adminPassword string
	// unlock releases the data directory's demo.lock (lockDemoDir).
	unlock func() error
}

// startDemo starts the mock fleet with n accounts, the gateway on cfg, and
// creates an API key. Call close when done.
// faultRate, when > 0, makes that fraction of the fleet fail in a mix of every
// fault that happens before the first content (those another account can serve).
// mockListen is the mock fleet's address (host:port; port 0: a free one).
func startDemo(ctx context.Context, cfg *Config, n int, faultRate float64, mockListen string, logOut io.Writer) (*demo, error) {
	return startDemoMockOn(ctx, cfg, mockListen, logOut, func(mockAddr string) ([]mock.Account, []storage.Account) {
		fa, pa := demoAccounts(n, mockAddr)
		if faultRate > 0 {
			mock.AssignFaults(fa, faultRate, nil, 1)
			for i := range fa {
				if f := fa[i].Fault; f != nil && f.Kind == mock.FaultSlowFirstToken {
					f.Delay = 2 * time.Minute // past the gateway's first-token timeout
				}
			}
		}
		return fa, pa
	})
}

// accountsFunc returns the mock fleet accounts and their pool entries for a
// fleet listening on mockAddr (host:port).
type accountsFunc func(mockAddr string) ([]mock.Account, []storage.Account)

// startDemoWith is startDemo with the fleet and pool accounts chosen by
// accounts (tests use it to pick latency, pacing and limits).
// The mock fleet listens on a free port of 127.0.0.1.
func startDemoWith(ctx context.Context, cfg *Config, logOut io.Writer, accounts accountsFunc) (*demo, error) {
	return startDemoMockOn(ctx, cfg, "127.0.0.1:0", logOut, accounts)
}

// startDemoMockOn is startDemoWith with the mock fleet on mockListen
// (host:port; port 0: a free one), troupe demo --mock-listen.
func startDemoMockOn(ctx context.Context, cfg *Config, mockListen string, logOut io.Writer, accounts accountsFunc) (*demo, error) {
	unlock, err := lockDemoDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	d, err := startDemoLocked(ctx, cfg, mockListen, logOut, accounts)
	if err != nil {
		unlock()
		return nil, err
	}
	d.unlock = unlock
	return d, nil
}

// lockDemoDir makes sure no other demo or instance runs on the data
// directory before the demo rewrites its pool and revokes its keys: a
// second `make demo` used to do both to the demo already running there,
// then fail on the usage journal's lock, leaving the first one on dead
// accounts and a revoked key. It holds demo.lock for the demo's life
// (another demo) and checks the usage journal's lock (a `troupe serve`).
func lockDemoDir(dir string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	unlock, err = journal.LockFile(filepath.Join(dir, "demo.lock"))
	if err != nil {
		return nil, busyDirError(dir, "another troupe demo", stopHint(dir))
	}
	probe, err := journal.LockFile(filepath.Join(dir, "usage.journal"))
	if err != nil {
		unlock()
		return nil, busyDirError(dir, "a troupe serve", stopHint(dir))
	}
	probe()
	return unlock, nil
}

// startDemoLocked is startDemoWith once the data directory is the demo's.
// The gateway's port is bound first: a busy one fails the demo before the
// mock fleet, the pool and the key are made.
func startDemoLocked(ctx context.Context, cfg *Config, mockListen string, logOut io.Writer, accounts accountsFunc) (d *demo, err error) {
	ln, err := listenFront(cfg.Listen)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	fleet := mock.New(mock.Config{})
	mockAddr, err := fleet.Start(mockListen)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("mock fleet: listen on %s: %w: pick another with --mock-listen ADDR, or leave it out for a free port", mockListen, syscall.EADDRINUSE)
	}
	if err != nil {
		return nil, fmt.Errorf("mock fleet: %w", err)
	}
	fa, pa := accounts(mockAddr)
	for _, a := range fa {
		fleet.Add(a)
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		fleet.Close()
		return nil, err
	}
	if err := syncDemoAccounts(ctx, store, pa); err != nil {
		store.Close()
		fleet.Close()
		return nil, err
	}
	_, err = revokeDemoKeys(ctx, store) // the previous runs' keys (demo_keys.go)
	var secret string
	var key storage.APIKey
	if err == nil {
		secret, key, err = gateway.NewKey(fmt.Sprintf("demo-%d", time.Now().UnixNano()))
	}
	if err == nil {
		_, err = store.CreateAPIKey(ctx, key)
	}
	if err != nil {
		store.Close()
		fleet.Close()
		return nil, fmt.Errorf("api key: %w", err)
	}
	a := &app{cfg: cfg, log: newLogger(cfg, logOut), store: store, ln: ln}
	if err := a.start(ctx); err != nil {
		store.Close()
		fleet.Close()
		return nil, err
	}
	adminPassword, err := resetAdminPassword(ctx, store, cfg.Admin.Password)
	if err != nil {
		a.shutdown(5 * time.Second)
		fleet.Close()
		return nil, fmt.Errorf("admin user: %w", err)
	}
	a.admin.generated = "" // the demo prints its own line
	a.serve()
	return &demo{fleet: fleet, app: a, apiKey: secret, adminPassword: adminPassword, mockAddr: mockAddr}, nil
}

func (d *demo) close() error {
	err := d.app.shutdown(10 * time.Second)
	d.fleet.Close()
	if d.unlock != nil {
		d.unlock()
		d.unlock = nil
	}
	return err
}

func demoCmd() *cobra.Command {
	var accounts int
	var faultRate float64
	var mockListen string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the gateway in front of a built-in mock upstream fleet",
		Long: `Start a mock upstream fleet (accounts by number mod 4: codex serving gpt-5.5,
openai serving gpt-4.1-mini, anthropic serving claude-sonnet-4-5, openai_compat
serving qwen3-32b), the gateway on the embedded storage, and an API key. Prints
TROUPE_BASE_URL=…, TROUPE_API_KEY=…, TROUPE_ADMIN_URL=… and TROUPE_ADMIN_PASSWORD=…
on stdout, then the mock fleet's address and curl examples, and serves until
SIGINT or SIGTERM (troupe stop --data ./data/demo sends it from another shell).
Logs go to stderr.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFrom(cmd)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("data") {
				cfg.DataDir = "./data/demo"
			}
			if accounts < 1 {
				return fmt.Errorf("--accounts must be at least 1")
			}
			if mockListen, err = hostPort("--mock-listen", mockListen); err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			if faultRate < 0 || faultRate > 1 {
				return fmt.Errorf("--fault-rate must be between 0 and 1")
			}
			// A first start that fails removes the data directory it made.
			claim, err := claimStart(cfg.DataDir)
			if err != nil {
				return err
			}
			defer claim.release()
			if faultRate > 0 {
				// Faulted accounts hang or stall; tighter waits than production
				// defaults let the demo fail over in seconds rather than minutes.
				if !cmd.Flags().Changed("config") {
					cfg.Gateway.FirstTokenTimeout = min(cfg.Gateway.FirstTokenTimeout, 5*time.Second)
					cfg.Gateway.NonStreamTimeout = min(cfg.Gateway.NonStreamTimeout, 15*time.Second)
				}
			}
			d, err := startDemo(ctx, cfg, accounts, faultRate, mockListen, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			// troupe stop --data ./data/demo finds this process by it (stop.go).
			removePid, err := writePidFile(cfg.DataDir, d.app.addr())
			if err != nil {
				d.close()
				return err
			}
			defer removePid()
			claim.started()
			d.app.background(ctx)
			out := cmd.OutOrStdout()
			base := d.app.baseURL()
			fmt.Fprintf(out, "TROUPE_BASE_URL=%s\nTROUPE_API_KEY=%s\n", base, d.apiKey)
			fmt.Fprintf(out, "TROUPE_ADMIN_URL=http://%s/admin/\nTROUPE_ADMIN_PASSWORD=%s\n", d.app.uiHost(), d.adminPassword)
			fmt.Fprintf(out, "# mock fleet: http://%s (point accounts of your own at it: docs/mock.md)\n", d.mockAddr)
			fmt.Fprintf(out, "# %d mock accounts: codex ones serve %s, openai ones %s, anthropic ones %s, openai_compat ones %s. Try:\n",
				accounts, demoCodexModel, demoOpenAIModel, demoAnthropicModel, demoCompatModel)
			for _, c := range demoCurls() {
				fmt.Fprintf(out, "# %s\n", c)
			}
			<-ctx.Done()
			d.app.log.Info("shutting down")
			return d.close()
		},
	}
	cmd.Flags().String("listen", "", "listen address (default 127.0.0.1:8080)")
	cmd.Flags().String("data", "", "data directory (default ./data/demo)")
	cmd.Flags().StringVar(&mockListen, "mock-listen", "127.0.0.1:0", "the mock fleet's listen address (port 0: a free port, printed as # mock fleet:)")
	cmd.Flags().IntVar(&accounts, "accounts", 1000, "number of mock accounts")
	policyFlags(cmd)
	cmd.Flags().Float64Var(&faultRate, "fault-rate", 0, "fraction of mock accounts (0..1) that fail before first content, in a mix of faults")
	return cmd
}

func mockCmd() *cobra.Command {
	var listen, scenarioRef, dataDir string
	var accounts int
	cmd := &cobra.Command{
		Use:   "mock",
		Short: "Run the mock upstream fleet alone",
		Long: `Serve the mock upstream fleet used by the demo and the load tests: accounts
demo-0001 … with tokens mock-token-demo-0001 …, by number mod 4: codex accounts (1)
on /backend-api/codex/responses, openai accounts (2) on /v1, anthropic accounts (3)
on /v1/messages (x-api-key), openai_compat accounts (0) on /v1/chat/completions.
With --scenario (a troupe bench scenario), the fleet is that scenario's
instead: bench-00001 … with tokens bench-token-bench-00001 …, its timing and faults.
Once listening it prints MOCK_ADDR=host:port and writes its pid file,
./data/mock/troupe.pid (--data DIR), and serves until SIGINT or SIGTERM:
troupe stop --mock (--mock --data DIR) sends it from another shell. A second
mock on the same directory is refused; give it --data DIR of its own.`,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if listen, err = hostPort("--listen", listen); err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			claim, err := claimStart(dataDir)
			if err != nil {
				return err
			}
			defer claim.release()
			fleet := mock.New(mock.Config{})
			fa, _ := demoAccounts(accounts, listen)
			if scenarioRef != "" {
				s, _, err := loadScenario(scenarioRef)
				if err != nil {
					return err
				}
				fa = s.MockAccounts()
			}
			for _, a := range fa {
				fleet.Add(a)
			}
			addr, err := fleet.Start(listen)
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("listen on %s: %w: another program (another troupe mock?) has this port; stop it (troupe stop --mock), or pick another address with --listen ADDR", listen, syscall.EADDRINUSE)
			}
			if err != nil {
				return err
			}
			// troupe stop --mock finds this process by it (stop.go).
			removePid, err := writePidFile(dataDir, addr)
			if err != nil {
				fleet.Close()
				return err
			}
			defer removePid()
			claim.started()
			fmt.Fprintf(cmd.OutOrStdout(), "MOCK_ADDR=%s\n", addr)
			<-ctx.Done()
			return fleet.Close()
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9090", "listen address")
	cmd.Flags().StringVar(&dataDir, "data", mockDataDir, "directory of the mock's pid file, troupe.pid, by which troupe stop --mock (--data DIR) stops it; nothing else is stored")
	cmd.Flags().IntVar(&accounts, "accounts", 1000, "number of mock accounts")
	cmd.Flags().StringVar(&scenarioRef, "scenario", "", "serve the fleet of this troupe bench scenario (a shipped name or a YAML file) instead")
	return cmd
}

// demoCurls returns the curl command lines troupe demo prints to try it,
// one a request: Chat Completions, Responses (streamed), Chat Completions
// to the openai_compat accounts, Messages (streamed) and the model list.
// The README's "Try it" block shows the same commands
// (TestReadmeShowsTheDemoCurls).
func demoCurls() []string {
	return []string{
		`curl -s $TROUPE_BASE_URL/chat/completions -H "Authorization: Bearer $TROUPE_API_KEY" -H 'content-type: application/json' -d '{"model":"` + demoOpenAIModel + `","messages":[{"role":"user","content":"hi"}]}'`,
		`curl -sN $TROUPE_BASE_URL/responses -H "Authorization: Bearer $TROUPE_API_KEY" -H 'content-type: application/json' -d '{"model":"` + demoCodexModel + `","input":"hi","stream":true}'`,
		`curl -s $TROUPE_BASE_URL/chat/completions -H "Authorization: Bearer $TROUPE_API_KEY" -H 'content-type: application/json' -d '{"model":"` + demoCompatModel + `","messages":[{"role":"user","content":"hi"}]}'`,
		`curl -sN $TROUPE_BASE_URL/messages -H "x-api-key: $TROUPE_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{"model":"` + demoAnthropicModel + `","max_tokens":256,"messages":[{"role":"user","content":"hi"}],"stream":true}'`,
		`curl -s $TROUPE_BASE_URL/models -H "Authorization: Bearer $TROUPE_API_KEY"`,
	}
}
