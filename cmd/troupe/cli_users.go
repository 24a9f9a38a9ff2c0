package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
)

// announceBilling tells running gateways that users or prices changed (msg
// says what) on the cache's billing channel, so they reload at once; with
// the in-memory cache they see it within 30 s (prices) or 10 s (users). A
// failure is a warning: the change itself is stored.
func announceBilling(cmd *cobra.Command, cfg *Config, msg string) {
	if cfg.Cache.Driver != "redis" {
		fmt.Fprintln(cmd.ErrOrStderr(), "# running gateways apply this within 30 s; with cache.driver redis they apply it at once")
		return
	}
	announce(cmd, cfg, billing.Channel, msg, "30 s")
}

func usersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "users", Short: "Manage users: tenants with a balance who pay per token (docs/billing.md)"}
	dataFlag(cmd)
	cmd.AddCommand(usersAddCmd(), usersListCmd(), usersTopupCmd(), usersShowCmd())
	return cmd
}

// usersAddCmd is troupe users add.
func usersAddCmd() *cobra.Command {
	var (
		password, balance, email, group string
		models                          []string
		rpm, concurrency                int64
	)
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a user, optionally with a console password and a starting balance",
		Example: `  troupe users add alice --balance 20
  troupe users add bob --password 'a long passphrase' --balance 5.50 --rpm 60 --concurrency 4 --models gpt-5,claude-sonnet-4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u := storage.User{Name: args[0], Email: email, Group: group, Models: models, RPM: rpm, MaxConcurrency: concurrency}
			if password != "" {
				if err := admin.CheckPassword(password); err != nil {
					return fmt.Errorf("--password: %s", strings.Replace(err.Error(), "an admin password", "a password", 1))
				}
				h, err := admin.HashPassword(password)
				if err != nil {
					return err
				}
				u.PasswordHash = h
			}
			var start int64
			if balance != "" {
				var err error
				if start, err = billing.ParseAmount(balance); err != nil {
					return fmt.Errorf("--balance: %w", err)
				}
				if start < 0 {
					return fmt.Errorf("--balance %s: a starting balance cannot be negative", balance)
				}
			}
			return withConfigStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				got, err := s.CreateUser(ctx, u, storage.NewUser{Balance: start, Actor: "cli", Note: "starting balance"})
				if errors.Is(err, storage.ErrConflict) {
					return fmt.Errorf("a user named %q (or with that email) exists (troupe users list shows them)", u.Name)
				}
				if err != nil {
					return fmt.Errorf("create user %q: %w", u.Name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\n", got.Name, got.ID, billing.FormatAmount(start))
				fmt.Fprintf(cmd.ErrOrStderr(), "# give it a key: troupe keys create --name %s-key --user %s\n", got.Name, got.Name)
				return nil
			})
		},
	}
	add.Flags().StringVar(&password, "password", "", "console password (argon2id-hashed; same strength rule as admin passwords); none: keys only")
	add.Flags().StringVar(&balance, "balance", "", "starting balance, a decimal amount of the currency (e.g. 20 or 5.50), credited as a top-up")
	add.Flags().StringVar(&email, "email", "", "email (unique; may be used to log in)")
	add.Flags().StringVar(&group, "group", "", "price group (its multiplier applies to every price)")
	add.Flags().StringSliceVar(&models, "models", nil, "model allowlist (default: every priced model)")
	add.Flags().Int64Var(&rpm, "rpm", 0, "requests per minute across the user's keys (0: unlimited)")
	add.Flags().Int64Var(&concurrency, "concurrency", 0, "requests in flight at once across the user's keys (0: unlimited)")
	return add
}

const userHeader = "NAME\tEMAIL\tGROUP\tBALANCE\tSTATE\tMODELS\tRPM\tCONCURRENCY\tCREATED"

// userRow is a user's line in users list: "-" is none or unlimited, "*" every model.
func userRow(u storage.User, balance int64) string {
	models := strings.Join(u.Models, ",")
	if models == "" {
		models = "*"
	}
	state := "enabled"
	if u.Disabled {
		state = "disabled"
	}
	return strings.Join([]string{u.Name, orDash(u.Email), orDash(u.Group), billing.FormatAmount(balance), state, models,
		limitText(u.RPM), limitText(u.MaxConcurrency), u.CreatedAt.UTC().Format(time.RFC3339)}, "\t")
}

// usersListCmd is troupe users list.
func usersListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List users with their balances",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				users, err := s.ListUsers(ctx)
				if err != nil {
					return err
				}
				balances, err := s.Balances(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, userHeader)
				for _, u := range users {
					fmt.Fprintln(w, userRow(u, balances[u.ID]))
				}
				return w.Flush()
			})
		},
	}
}

// usersTopupCmd is troupe users topup.
func usersTopupCmd() *cobra.Command {
	var note string
	topup := &cobra.Command{
		Use:     "topup NAME AMOUNT",
		Short:   "Credit a user's balance (a ledger top-up row with the note)",
		Example: `  troupe users topup alice 20 --note "invoice 2026-031"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			amount, err := billing.ParseAmount(args[1])
			if err != nil {
				return err
			}
			if amount <= 0 {
				return fmt.Errorf("AMOUNT %s: a top-up must be positive", args[1])
			}
			if strings.TrimSpace(note) == "" {
				return fmt.Errorf("--note is required: say why (it is kept in the ledger)")
			}
			return withExistingStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				u, err := s.GetUser(ctx, args[0])
				if err != nil {
					return fmt.Errorf("user %q: %w", args[0], err)
				}
				if _, err := s.PostLedger(ctx, storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerTopup, Amount: amount, Actor: "cli", Note: note}); err != nil {
					return fmt.Errorf("top up %q: %w", u.Name, err)
				}
				b, err := s.Balance(ctx, u.ID)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", u.Name, billing.FormatAmount(b))
				return nil
			})
		},
	}
	topup.Flags().StringVar(&note, "note", "", "why (kept in the ledger; required)")
	return topup
}

// usersShowCmd is troupe users show.
func usersShowCmd() *cobra.Command {
	var rows int
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Print a user, its balance and its last ledger rows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				u, err := s.GetUser(ctx, args[0])
				if err != nil {
					return fmt.Errorf("user %q: %w", args[0], err)
				}
				b, err := s.Balance(ctx, u.ID)
				if err != nil {
					return err
				}
				currency, err := s.GetSetting(ctx, storage.SettingCurrency)
				if err != nil {
					currency = storage.DefaultCurrency
				}
				out := cmd.OutOrStdout()
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "name\t%s\nid\t%s\nbalance\t%s %s\n", u.Name, u.ID, billing.FormatAmount(b), currency)
				fmt.Fprintf(w, "email\t%s\ngroup\t%s\nstate\t%s\n", orDash(u.Email), orDash(u.Group), map[bool]string{false: "enabled", true: "disabled"}[u.Disabled])
				models := strings.Join(u.Models, ",")
				if models == "" {
					models = "*"
				}
				fmt.Fprintf(w, "models\t%s\nrpm\t%s\nconcurrency\t%s\nconsole login\t%s\n", models, limitText(u.RPM), limitText(u.MaxConcurrency), yesNo(u.PasswordHash != ""))
				if err := w.Flush(); err != nil {
					return err
				}
				ledger, err := s.Ledger(ctx, storage.LedgerQuery{UserID: u.ID, Limit: rows})
				if err != nil || len(ledger) == 0 {
					return err
				}
				fmt.Fprintln(out)
				w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "WHEN\tKIND\tAMOUNT\tBY\tREQUEST\tNOTE")
				for _, e := range ledger {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.CreatedAt.Format(time.RFC3339), e.Kind, billing.FormatAmount(e.Amount), orDash(e.Actor), orDash(e.RequestID), orDash(e.Note))
				}
				return w.Flush()
			})
		},
	}
	show.Flags().IntVar(&rows, "ledger", 10, "how many of the latest ledger rows to print")
	return show
}

func pricesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "prices", Short: "Manage model prices for users, per million tokens (docs/billing.md)"}
	dataFlag(cmd)
	cmd.AddCommand(pricesSetCmd(), pricesListCmd())
	return cmd
}

// pricesSetCmd is troupe prices set.
func pricesSetCmd() *cobra.Command {
	var input, output, cachedInput, cacheWrite string
	set := &cobra.Command{
		Use:   "set MODEL",
		Short: "Set a model's price per million tokens (decimal amounts of the currency)",
		Example: `  troupe prices set gpt-5 --input 1.25 --cached-input 0.125 --output 10
  troupe prices set claude-sonnet-4 --input 3 --output 15 --cached-input 0.30 --cache-write 3.75`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if input == "" || output == "" {
				return fmt.Errorf("--input and --output are required")
			}
			p := storage.Price{Model: args[0]}
			for _, f := range []struct {
				flag, v string
				dst     *int64
			}{{"--input", input, &p.Input}, {"--output", output, &p.Output}, {"--cached-input", cachedInput, &p.CachedInput}, {"--cache-write", cacheWrite, &p.CacheWrite}} {
				if f.v == "" {
					continue
				}
				v, err := billing.ParseAmount(f.v)
				if err != nil {
					return fmt.Errorf("%s: %w", f.flag, err)
				}
				if v < 0 {
					return fmt.Errorf("%s %s: a price cannot be negative", f.flag, f.v)
				}
				*f.dst = v
			}
			if cachedInput == "" {
				p.CachedInput = p.Input // no discount unless one is set
			}
			if cacheWrite == "" {
				p.CacheWrite = billing.DefaultCacheWrite(p.Input)
			}
			return withConfigStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				currency, err := s.GetSetting(ctx, storage.SettingCurrency)
				if err != nil {
					currency = storage.DefaultCurrency
				}
				p.Currency = currency
				got, err := s.PutPrice(ctx, p)
				if err != nil {
					return fmt.Errorf("set the price of %q: %w", p.Model, err)
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, priceHeader)
				fmt.Fprintln(w, priceRow(got))
				if err := w.Flush(); err != nil {
					return err
				}
				announceBilling(cmd, cfg, "price "+p.Model)
				return nil
			})
		},
	}
	set.Flags().StringVar(&input, "input", "", "uncached input tokens, per million (required)")
	set.Flags().StringVar(&output, "output", "", "output tokens, reasoning included, per million (required)")
	set.Flags().StringVar(&cachedInput, "cached-input", "", "input tokens read from the prompt cache, per million (default: --input)")
	set.Flags().StringVar(&cacheWrite, "cache-write", "", "input tokens written to the prompt cache, per million (default: --input × 1.25)")
	return set
}

const priceHeader = "MODEL\tCURRENCY\tINPUT/M\tCACHED_INPUT/M\tCACHE_WRITE/M\tOUTPUT/M\tUPDATED"

func priceRow(p storage.Price) string {
	return strings.Join([]string{p.Model, p.Currency, billing.FormatAmount(p.Input), billing.FormatAmount(p.CachedInput),
		billing.FormatAmount(p.CacheWrite), billing.FormatAmount(p.Output), p.UpdatedAt.UTC().Format(time.RFC3339)}, "\t")
}

// pricesListCmd is troupe prices list.
func pricesListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List model prices, per million tokens",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				prices, err := s.ListPrices(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, priceHeader)
				for _, p := range prices {
					fmt.Fprintln(w, priceRow(p))
				}
				return w.Flush()
			})
		},
	}
}
