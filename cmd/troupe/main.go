// Command troupe is the Troupe LLM API gateway. Subcommands: serve, demo,
// stop, mock, bench, keys, accounts, migrate, version. This package is wiring only.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "troupe:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "troupe",
		Short:         "Troupe: an LLM API gateway over a pool of upstream accounts",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringP("config", "c", "", "YAML config file (default: none; TROUPE_* env vars apply either way)")
	root.AddCommand(serveCmd(), demoCmd(), mockCmd(), keysCmd(), accountsCmd(), migrateCmd(), policyCmd(), versionCmd())
	root.AddCommand(benchCmd(), adminCmd(), usersCmd(), pricesCmd(), stopCmd())
	return root
}

// configFrom loads the config named by --config and applies the flags that
// override it.
func configFrom(cmd *cobra.Command) (*Config, error) {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := loadConfig(path, nil)
	if err != nil {
		return nil, err
	}
	if f := cmd.Flags().Lookup("listen"); f != nil && f.Changed {
		cfg.Listen = f.Value.String()
	}
	if f := cmd.Flags().Lookup("data"); f != nil && f.Changed {
		cfg.DataDir = f.Value.String()
	}
	if f := cmd.Flags().Lookup("policy-dir"); f != nil && f.Changed {
		cfg.Policies.Dir = f.Value.String()
	}
	if f := cmd.Flags().Lookup("policy"); f != nil && f.Changed {
		cfg.Policies.Active = f.Value.String()
	}
	return cfg, cfg.validate()
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// quietLogger discards everything (offline commands that print results).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// policyFlags adds --policy-dir and --policy to a command that serves.
func policyFlags(cmd *cobra.Command) {
	cmd.Flags().String("policy-dir", "", "directory of routing policies (NAME.lua), watched for changes")
	cmd.Flags().String("policy", "", "active routing policy: NAME.lua in the policy dir, else a built-in (default smart)")
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), "troupe", version) },
	}
}
