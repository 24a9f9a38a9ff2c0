// Command troupe is the Troupe LLM API gateway. Subcommands: serve, demo,
// stop, mock, bench, keys, accounts, migrate, version. This package is wiring only.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	root.SetFlagErrorFunc(flagError)
	return root
}

// flagError is the root's (so every command's) answer to a flag it does
// not know: cobra's error, and for --port, which Troupe does not have, the
// flag that sets the address instead (--listen; troupe bench's
// --gateway-listen).
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if !strings.HasPrefix(msg, "unknown flag: --port") && !strings.HasPrefix(msg, "unknown shorthand flag: 'p'") {
		return err
	}
	for _, name := range []string{"listen", "gateway-listen"} {
		if cmd.Flags().Lookup(name) != nil {
			return fmt.Errorf("%w: troupe %s takes its address as --%s HOST:PORT, e.g. --%s 127.0.0.1:9000 (a bare port, --%s 9000, is 127.0.0.1:9000)", err, cmd.Name(), name, name, name)
		}
	}
	return err
}

// hostPort checks a listen address given as flag (its name, for the
// error): host:port is returned as it is, and a bare port (9000) as
// 127.0.0.1:9000 — a newcomer's --listen 9000 means this machine, and
// Troupe listens on 127.0.0.1 unless told otherwise. Anything else is an
// error asking for host:port.
func hostPort(flag, addr string) (string, error) {
	if n, err := strconv.Atoi(addr); err == nil && n >= 0 && n <= 65535 && !strings.HasPrefix(addr, "+") {
		return net.JoinHostPort("127.0.0.1", addr), nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return "", fmt.Errorf("%s %q: want HOST:PORT, e.g. 127.0.0.1:9000 (a bare port is taken as 127.0.0.1:PORT)", flag, addr)
	}
	return addr, nil
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
