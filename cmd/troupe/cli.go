package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
)

// withStore opens the configured storage for one command.
func withStore(cmd *cobra.Command, fn func(ctx context.Context, s storage.Store) error) error {
	cfg, err := configFrom(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
	defer cancel()
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(ctx, s)
}

func dataFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().String("data", "", "data directory for the embedded storage (default ./data)")
}

func keysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Manage client API keys"}
	dataFlag(cmd)
	var name, group string
	var models []string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key and print its secret (shown once)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return fmt.Errorf("--name is required")
			}
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				secret, k, err := gateway.NewKey(name)
				if err != nil {
					return err
				}
				k.Group, k.Models = group, models
				if _, err := s.CreateAPIKey(ctx, k); err != nil {
					return fmt.Errorf("create key %q: %w", name, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				fmt.Fprintln(cmd.ErrOrStderr(), "# store this secret now: Troupe keeps only its hash")
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "key name (unique)")
	create.Flags().StringVar(&group, "group", "", "routing group")
	create.Flags().StringSliceVar(&models, "models", nil, "model allowlist (default: all)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never their secrets)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				keys, err := s.ListAPIKeys(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tPREFIX\tGROUP\tMODELS\tSTATE\tCREATED")
				for _, k := range keys {
					state := "enabled"
					if k.Disabled {
						state = "disabled"
					}
					fmt.Fprintf(w, "%s\t%s…\t%s\t%s\t%s\t%s\n", k.Name, k.Prefix, k.Group, strings.Join(k.Models, ","), state, k.CreatedAt.Format(time.RFC3339))
				}
				return w.Flush()
			})
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Delete an API key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error { return s.DeleteAPIKey(ctx, args[0]) })
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func accountsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "accounts", Short: "Manage upstream accounts"}
	dataFlag(cmd)
	var ac AccountConfig
	add := &cobra.Command{
		Use:   "add",
		Short: "Add or update an account (matched by name)",
		Example: `  troupe accounts add --name oai-1 --provider openai --api-key sk-... --models gpt-4.1-mini --max-concurrency 8
  troupe accounts add --name cx-1 --provider codex --access-token eyJ... --account-id 0000-... --models gpt-5.5`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ac.Name == "" || !storage.Provider(ac.Provider).Valid() {
				return fmt.Errorf("--name and --provider (codex, openai, openai_compat, anthropic) are required")
			}
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				a, err := s.PutAccount(ctx, ac.account())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", a.ID, a.Name)
				return nil
			})
		},
	}
	f := add.Flags()
	f.StringVar(&ac.Name, "name", "", "account name (unique)")
	f.StringVar(&ac.Provider, "provider", "", "codex, openai, openai_compat or anthropic")
	f.StringVar(&ac.BaseURL, "base-url", "", "upstream base URL (default: the provider's)")
	f.StringVar(&ac.APIKey, "api-key", "", "API key (openai, openai_compat, anthropic)")
	f.StringVar(&ac.Credentials.AccessToken, "access-token", "", "OAuth access token (codex)")
	f.StringVar(&ac.Credentials.RefreshToken, "refresh-token", "", "OAuth refresh token (codex)")
	f.StringVar(&ac.Credentials.AccountID, "account-id", "", "ChatGPT account id (codex)")
	f.StringSliceVar(&ac.Models, "models", nil, "models served (default: any)")
	f.IntVar(&ac.MaxConcurrency, "max-concurrency", 4, "in-flight requests allowed at once")
	f.StringVar(&ac.Group, "group", "", "routing group")
	f.StringSliceVar(&ac.Tags, "tags", nil, "routing tags")
	f.IntVar(&ac.Priority, "priority", 0, "routing priority (higher first, where a policy honours it)")
	f.BoolVar(&ac.Disabled, "disabled", false, "add the account disabled")
	list := &cobra.Command{
		Use:   "list",
		Short: "List accounts (never their credentials)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				accs, err := s.ListAccounts(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tPROVIDER\tMODELS\tCONCURRENCY\tGROUP\tSTATE\tID")
				for _, a := range accs {
					state := "enabled"
					if a.Disabled {
						state = "disabled"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.Name, a.Provider, strings.Join(a.Models, ","), a.MaxConcurrency, a.Group, state, a.ID)
				}
				return w.Flush()
			})
		},
	}
	remove := &cobra.Command{
		Use:   "remove NAME|ID",
		Short: "Remove an account",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error { return s.DeleteAccount(ctx, args[0]) })
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

func migrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply storage migrations and exit",
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Opening the store applies pending migrations (checksummed, in order).
			return withStore(cmd, func(context.Context, storage.Store) error {
				fmt.Fprintln(cmd.OutOrStdout(), "migrations applied")
				return nil
			})
		},
	}
	dataFlag(cmd)
	return cmd
}
