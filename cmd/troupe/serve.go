package main

import (
	"time"

	"github.com/troupe-gw/troupe/internal/memtrim"

	"github.com/spf13/cobra"
)

func serveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway on the configured listen address until SIGINT or SIGTERM
(troupe stop sends it, found by {data_dir}/troupe.pid).
Accounts declared in the config file are upserted into storage at start; accounts
added with "troupe accounts add" are picked up while it runs.`,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, err := configFrom(cmd)
			if err != nil {
				return err
			}
			// A first start that fails removes the data directory it made.
			claim, err := claimStart(cfg.DataDir)
			if err != nil {
				return err
			}
			defer claim.release()
			log := newLogger(cfg, cmd.ErrOrStderr())
			ctx, stop := signalContext()
			defer stop()
			a, err := startApp(ctx, cfg, log)
			if err != nil {
				return err
			}
			// troupe stop finds this process by it (stop.go).
			removePid, err := writePidFile(cfg.DataDir, a.addr())
			if err != nil {
				a.shutdown(5 * time.Second)
				return err
			}
			defer removePid()
			claim.started()
			a.serve()
			a.printAdminPassword(cmd.OutOrStdout())
			a.background(ctx)
			// After a burst of load, its free heap goes back to the system.
			trim := memtrim.Start(memtrim.Config{})
			defer trim.Stop()
			registerTrimMetrics(a.metrics, trim)
			select {
			case <-ctx.Done():
			case err = <-a.served:
			}
			log.Info("shutting down")
			if serr := a.shutdown(30 * time.Second); err == nil {
				err = serr
			}
			return err
		},
	}
	cmd.Flags().String("listen", "", "listen address (default 127.0.0.1:8080)")
	cmd.Flags().String("data", "", "data directory for the embedded storage (default ./data)")
	policyFlags(cmd)
	return cmd
}
