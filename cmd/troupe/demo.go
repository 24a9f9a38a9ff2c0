package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
)

// Demo pool: odd-numbered accounts are codex accounts serving demoCodexModel,
// even-numbered ones openai accounts serving demoOpenAIModel.
const (
	demoCodexModel  = "gpt-5.5"
	demoOpenAIModel = "gpt-4.1-mini"
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

// demoAccount returns demo account number i (demo-%04d): a codex account
// serving demoCodexModel when i is odd, an openai account serving
// demoOpenAIModel when i is even; its mock fleet entry and its pool entry.
func demoAccount(i int, mockAddr string) (mock.Account, storage.Account) {
	name := fmt.Sprintf("demo-%04d", i)
	token := "mock-token-" + name
	ma := mock.Account{Name: name, Token: token, Latency: 30 * time.Millisecond, TokensPerSecond: 200, OutputTokens: 12}
	sa := storage.Account{Name: name, MaxConcurrency: 4, Group: ""}
	if i%2 == 1 {
		ma.Kind, ma.Models = mock.KindCodex, []string{demoCodexModel}
		ma.ChatGPTAccountID = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		sa.Provider, sa.Models = storage.ProviderCodex, []string{demoCodexModel}
		sa.BaseURL = "http://" + mockAddr + "/backend-api/codex"
		sa.Credentials = storage.Credentials{AccessToken: token, AccountID: ma.ChatGPTAccountID}
	} else {
		ma.Kind, ma.Models = mock.KindOpenAI, []string{demoOpenAIModel}
		sa.Provider, sa.Models = storage.ProviderOpenAI, []string{demoOpenAIModel}
		sa.BaseURL = "http://" + mockAddr + "/v1"
		sa.Credentials = storage.Credentials{APIKey: token}
	}
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
}

// startDemo starts the mock fleet with n accounts, the gateway on cfg, and
// creates an API key. Call close when done.
// faultRate, when > 0, makes that fraction of the fleet fail in a mix of every
// fault that happens before the first content (those another account can serve).
func startDemo(ctx context.Context, cfg *Config, n int, faultRate float64, logOut io.Writer) (*demo, error) {
	return startDemoWith(ctx, cfg, logOut, func(mockAddr string) ([]mock.Account, []storage.Account) {
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
func startDemoWith(ctx context.Context, cfg *Config, logOut io.Writer, accounts accountsFunc) (*demo, error) {
	fleet := mock.New(mock.Config{})
	mockAddr, err := fleet.Start("127.0.0.1:0")
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
	secret, key, err := gateway.NewKey(fmt.Sprintf("demo-%d", time.Now().UnixNano()))
	if err == nil {
		_, err = store.CreateAPIKey(ctx, key)
	}
	if err != nil {
		store.Close()
		fleet.Close()
		return nil, fmt.Errorf("api key: %w", err)
	}
	a := &app{cfg: cfg, log: newLogger(cfg, logOut), store: store}
	if err := a.start(ctx); err != nil {
		store.Close()
		fleet.Close()
		return nil, err
	}
	a.serve()
	return &demo{fleet: fleet, app: a, apiKey: secret}, nil
}

func (d *demo) close() error {
	err := d.app.shutdown(10 * time.Second)
	d.fleet.Close()
	return err
}

func demoCmd() *cobra.Command {
	var accounts int
	var faultRate float64
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the gateway in front of a built-in mock upstream fleet",
		Long: `Start a mock upstream fleet (codex accounts serving gpt-5.5, openai accounts serving
gpt-4.1-mini), the gateway on the embedded storage, and an API key. Prints
TROUPE_BASE_URL=… and TROUPE_API_KEY=… on stdout, then curl examples, and serves
until SIGINT or SIGTERM. Logs go to stderr.`,
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
			ctx, stop := signalContext()
			defer stop()
			if faultRate < 0 || faultRate > 1 {
				return fmt.Errorf("--fault-rate must be between 0 and 1")
			}
			if faultRate > 0 {
				// Faulted accounts hang or stall; tighter waits than production
				// defaults let the demo fail over in seconds rather than minutes.
				if !cmd.Flags().Changed("config") {
					cfg.Gateway.FirstTokenTimeout = min(cfg.Gateway.FirstTokenTimeout, 5*time.Second)
					cfg.Gateway.NonStreamTimeout = min(cfg.Gateway.NonStreamTimeout, 15*time.Second)
				}
			}
			d, err := startDemo(ctx, cfg, accounts, faultRate, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			d.app.background(ctx)
			out := cmd.OutOrStdout()
			base := d.app.baseURL()
			fmt.Fprintf(out, "TROUPE_BASE_URL=%s\nTROUPE_API_KEY=%s\n", base, d.apiKey)
			fmt.Fprintf(out, `# %d mock accounts: codex ones serve %s, openai ones serve %s. Try:
# curl -s $TROUPE_BASE_URL/chat/completions -H "Authorization: Bearer $TROUPE_API_KEY" -H 'content-type: application/json' -d '{"model":"%s","messages":[{"role":"user","content":"hi"}]}'
# curl -sN $TROUPE_BASE_URL/responses -H "Authorization: Bearer $TROUPE_API_KEY" -H 'content-type: application/json' -d '{"model":"%s","input":"hi","stream":true}'
# curl -s $TROUPE_BASE_URL/models -H "Authorization: Bearer $TROUPE_API_KEY"
`, accounts, demoCodexModel, demoOpenAIModel, demoOpenAIModel, demoCodexModel)
			<-ctx.Done()
			d.app.log.Info("shutting down")
			return d.close()
		},
	}
	cmd.Flags().String("listen", "", "listen address (default 127.0.0.1:8080)")
	cmd.Flags().String("data", "", "data directory (default ./data/demo)")
	cmd.Flags().IntVar(&accounts, "accounts", 1000, "number of mock accounts")
	policyFlags(cmd)
	cmd.Flags().Float64Var(&faultRate, "fault-rate", 0, "fraction of mock accounts (0..1) that fail before first content, in a mix of faults")
	return cmd
}

func mockCmd() *cobra.Command {
	var listen string
	var accounts int
	cmd := &cobra.Command{
		Use:   "mock",
		Short: "Run the mock upstream fleet alone",
		Long: `Serve the mock upstream fleet used by the demo and the load tests: accounts
demo-0001 … with tokens mock-token-demo-0001 …; codex accounts (odd numbers) on
/backend-api/codex/responses, openai accounts (even numbers) on /v1.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			fleet := mock.New(mock.Config{})
			fa, _ := demoAccounts(accounts, listen)
			for _, a := range fa {
				fleet.Add(a)
			}
			addr, err := fleet.Start(listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "MOCK_ADDR=%s\n", addr)
			<-ctx.Done()
			return fleet.Close()
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9090", "listen address")
	cmd.Flags().IntVar(&accounts, "accounts", 1000, "number of mock accounts")
	return cmd
}
