// Command troupe is the Troupe LLM API gateway. Subcommands: serve, demo,
// mock, keys, accounts, migrate, version. This package is wiring only.
package main

import (
	"context"
	"fmt"
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
	root.AddCommand(serveCmd(), demoCmd(), mockCmd(), keysCmd(), accountsCmd(), migrateCmd(), versionCmd())
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
	return cfg, cfg.validate()
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), "troupe", version) },
	}
}
