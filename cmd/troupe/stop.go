package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/storage/journal"
)

// pidFileName is the file in the data directory that names the process
// serving on it (troupe serve, troupe demo, or troupe mock in its own
// directory, ./data/mock by default): its pid, a newline and its listen
// address. The process holds an exclusive advisory lock (flock) on
// the file while it runs, so a file nobody holds is stale (a kill -9, a
// crash), whatever pid it names.
const pidFileName = "troupe.pid"

// writePidFile writes {dir}/troupe.pid for this process, listening on
// addr, and locks it; remove deletes it and releases the lock (call it
// once, at exit). An error says another process holds it.
func writePidFile(dir, addr string) (remove func(), err error) {
	path := filepath.Join(dir, pidFileName)
	release, err := journal.LockFile(path)
	if err != nil {
		return nil, busyDirError(dir, "another troupe", stopHint(dir))
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"+addr+"\n"), 0o600); err != nil {
		release()
		return nil, fmt.Errorf("pid file: %w", err)
	}
	return func() {
		os.Remove(path) // before the lock goes: a new start then makes its own
		release()
	}, nil
}

// readPidFile returns the pid and address {dir}/troupe.pid names, and
// whether a process still holds it (running: a stale file is not held).
func readPidFile(dir string) (pid int, addr string, running bool, err error) {
	path := filepath.Join(dir, pidFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", false, err
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, "", false, fmt.Errorf("%s: not a pid file (%q)", path, first)
	}
	addr = strings.TrimSpace(rest)
	release, lerr := journal.LockFile(path)
	if lerr != nil {
		return pid, addr, true, nil // held: the process runs
	}
	release()
	if b, _ := os.ReadFile(path); len(b) == 0 {
		// The process removed its file between the read and the lock, and
		// LockFile made an empty one: not left behind.
		os.Remove(path)
	}
	return pid, addr, false, nil
}

// stopCmd is "troupe stop": SIGTERM to the troupe serve, troupe demo or
// troupe mock running on the data directory, found by its pid file.
func stopCmd() *cobra.Command {
	var timeout time.Duration
	var mockOnly bool
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the troupe serve, demo or mock running on a data directory",
		Long: `Send SIGTERM to the troupe serve or troupe demo that runs on the data
directory (--data, or data_dir of -c FILE, or TROUPE_DATA_DIR; troupe demo's is
./data/demo), and wait until it has exited: it stops taking requests, lets the
open ones finish (up to 30 s), writes the usage it holds and closes storage, as
with Ctrl-C. The process is found by {data_dir}/troupe.pid, which serve and
demo write once listening and remove at exit; the same signal can be sent by
hand: kill -TERM $(head -1 DATA_DIR/troupe.pid). A pid file left by a process
that died (kill -9) is seen as such and removed, never signalled.

troupe mock keeps its pid file in a directory of its own, ./data/mock unless
started with --data DIR (it does not read TROUPE_DATA_DIR or the config, so it
never takes the pid file of a gateway): --mock stops it, --mock --data DIR the
one started with that --data.`,
		Example: `  troupe stop                      # troupe serve on ./data
  troupe stop --data ./data/demo   # make demo
  troupe stop -c troupe.yaml
  troupe stop --mock               # troupe mock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if mockOnly {
				dir := mockDataDir
				if f := cmd.Flags().Lookup("data"); f.Changed {
					dir = f.Value.String()
				}
				return stopOn(cmd, dir, timeout)
			}
			cfg, err := configFrom(cmd)
			if err != nil {
				return err
			}
			return stopOn(cmd, cfg.DataDir, timeout)
		},
	}
	cmd.Flags().String("data", "", "data directory of the gateway to stop (default ./data; make demo's: ./data/demo; with --mock: ./data/mock)")
	cmd.Flags().BoolVar(&mockOnly, "mock", false, "stop the troupe mock of ./data/mock (or of --data DIR) instead")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for it to exit")
	return cmd
}

// stopOn stops the process running on dir and waits up to timeout for it
// to release its pid file.
func stopOn(cmd *cobra.Command, dir string, timeout time.Duration) error {
	pid, addr, running, err := readPidFile(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no troupe runs on %s (no %s there; troupe demo's data directory is ./data/demo: --data DIR; troupe mock's: --mock)", dir, pidFileName)
	}
	if err != nil {
		return err
	}
	if !running {
		os.Remove(filepath.Join(dir, pidFileName))
		return fmt.Errorf("no troupe runs on %s: %s named pid %d, which exited without removing it (removed now)", dir, pidFileName, pid)
	}
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Signal(syscall.SIGTERM)
	}
	if err != nil {
		return fmt.Errorf("stop pid %d: %w", pid, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "# sent SIGTERM to troupe (pid %d, %s); waiting for it to exit\n", pid, addr)
	deadline := time.Now().Add(timeout)
	for {
		if _, _, running, err := readPidFile(dir); errors.Is(err, fs.ErrNotExist) || (err == nil && !running) {
			fmt.Fprintf(cmd.OutOrStdout(), "stopped troupe (pid %d) on %s\n", pid, dir)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d has not exited after %s (open requests may still be finishing): wait longer (--timeout), or kill -9 %d (usage not yet stored stays in usage.journal, written at the next start)", pid, timeout, pid)
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
