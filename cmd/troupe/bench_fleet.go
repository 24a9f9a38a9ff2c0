package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/bench/harness"
	"github.com/troupe-gw/troupe/bench/load"
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
	"github.com/troupe-gw/troupe/storage"
	"go.yaml.in/yaml/v3"
)

// The fleet settings of the instances a fleet run starts: the defaults of
// fleet.ttl and fleet.heartbeat (docs/fleet.md), so that the recovery
// figure is what a deployment on defaults sees.
const (
	benchFleetTTL       = 5 * time.Second
	benchFleetHeartbeat = time.Second
	benchKillWorkers    = 16
)

// runFleetBench is troupe bench for a scenario of several instances
// (gateway.instances > 1): it creates a database troupe_bench_<hex> on the
// PostgreSQL server of f.postgres (dropped at the end unless --keep),
// starts the mock fleet and the instances (fleet.ownership on that
// database and the Redis at f.redis, under a cache prefix of its own),
// waits until they own every account between them, runs the phases
// through the first instance, then reads the instances' fleet metrics and
// kills the last with SIGKILL to time the recovery (report.Fleet).
func runFleetBench(ctx context.Context, cmd *cobra.Command, f benchFlags, s *scenario.Scenario, cfg harness.Config, out string) error {
	if f.postgres == "" || f.redis == "" {
		return fmt.Errorf("bench: scenario %s runs %d instances as a fleet: give --postgres URL (a PostgreSQL server; a database is created for the run) and --redis URL", s.Name, s.Gateway.Instances)
	}
	if f.mockURL != "" {
		return errors.New("bench: --mock is not supported with gateway.instances above 1: the run starts its own mock fleet")
	}
	progress := cmd.ErrOrStderr()
	bin := f.troupeBin
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "troupe-bench-")
	if err != nil {
		return err
	}
	if f.keep {
		fmt.Fprintf(progress, "bench: keeping %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	dsn, drop, err := createBenchDB(ctx, f.postgres)
	if err != nil {
		return err
	}
	if !f.keep {
		defer drop()
	}
	var rnd [storage.KeySize]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	master := base64.StdEncoding.EncodeToString(rnd[:])
	var tag [4]byte // not the master key's bytes: the prefix is no secret
	if _, err := rand.Read(tag[:]); err != nil {
		return err
	}
	prefix := "troupe-bench-" + hex.EncodeToString(tag[:]) + ":"
	if !f.keep {
		// Deferred before env.stop, so it runs after the instances
		// stopped: their fencing tokens outlive the leases by design.
		defer func() {
			if err := clearBenchPrefix(f.redis, prefix); err != nil {
				fmt.Fprintf(progress, "bench: %v\n", err)
			}
		}()
	}
	env := &benchEnv{}
	defer env.stop(progress)

	scen, err := yaml.Marshal(s)
	if err != nil {
		return err
	}
	scenPath := filepath.Join(tmp, "scenario.yaml")
	if err := os.WriteFile(scenPath, scen, 0o644); err != nil {
		return err
	}
	childEnv := benchChildEnv()
	mockAddr, err := env.startMock(bin, tmp, scenPath, f.mockListen, childEnv)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "bench: mock fleet on %s (pid %d)\n", mockAddr, env.mock.Process.Pid)

	var insts []benchInstance
	for i := range s.Gateway.Instances {
		dir := filepath.Join(tmp, fmt.Sprintf("gw-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		listen, err := freeAddr()
		if err != nil {
			return err
		}
		confPath, err := writeBenchConfig(dir, listen, s)
		if err != nil {
			return err
		}
		fl, err := os.OpenFile(confPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(fl, `storage: {driver: postgres, dsn: %q, master_key: %q}
cache: {driver: redis, url: %q, prefix: %q}
fleet: {ownership: true, ttl: %s, heartbeat: %s}
`, dsn, master, f.redis, prefix, benchFleetTTL, benchFleetHeartbeat)
		if cerr := fl.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		insts = append(insts, benchInstance{conf: confPath, dir: dir, base: "http://" + listen})
	}
	start := time.Now()
	if err := provisionBench(ctx, insts[0].conf, s, mockAddr, env); err != nil {
		return err
	}
	fmt.Fprintf(progress, "bench: provisioned %d accounts in PostgreSQL in %.1fs\n", len(s.Fleet()), time.Since(start).Seconds())
	for i := range insts {
		in := &insts[i]
		lf, err := os.Create(filepath.Join(in.dir, "gateway.log"))
		if err != nil {
			return err
		}
		in.cmd = exec.Command(bin, "serve", "-c", in.conf)
		in.cmd.Env, in.cmd.Stdout, in.cmd.Stderr = childEnv, lf, lf
		if err := in.cmd.Start(); err != nil {
			return fmt.Errorf("bench: start instance %d: %w", i, err)
		}
		if i == 0 {
			env.gateway = in.cmd
		} else {
			env.fleet = append(env.fleet, in.cmd)
		}
	}
	for i, in := range insts {
		if err := waitReady(ctx, in.base+"/readyz", 5*time.Minute); err != nil {
			return fmt.Errorf("bench: instance %d: %w (log: %s)", i, err, filepath.Join(in.dir, "gateway.log"))
		}
		fmt.Fprintf(progress, "bench: instance %d on %s (pid %d)\n", i, strings.TrimPrefix(in.base, "http://"), in.cmd.Process.Pid)
	}
	owned := func(insts []benchInstance) ([]int, int) {
		var n []int
		sum := 0
		for _, in := range insts {
			o, err := metricSum(in.base, "troupe_fleet_owned_accounts")
			if err != nil {
				o = -1
			}
			n = append(n, int(o))
			sum += int(o)
		}
		return n, sum
	}
	waitOwned := func(insts []benchInstance, timeout time.Duration) (time.Duration, error) {
		t0 := time.Now()
		for {
			n, sum := owned(insts)
			if sum == s.Accounts {
				return time.Since(t0), nil
			}
			if time.Since(t0) > timeout {
				return 0, fmt.Errorf("bench: the instances own %v accounts after %v, want %d in all", n, timeout, s.Accounts)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if _, err := waitOwned(insts, 5*time.Minute); err != nil {
		return err
	}
	n, _ := owned(insts)
	fmt.Fprintf(progress, "bench: %d instances own %v accounts\n", len(insts), n)

	first := insts[0]
	cfg.Mode = "self"
	cfg.TargetDesc = fmt.Sprintf("instance 1 of %d troupe serve (pid %d) with fleet.ownership on PostgreSQL and Redis, in front of troupe mock (pid %d), %d accounts", len(insts), first.cmd.Process.Pid, env.mock.Process.Pid, s.Accounts)
	cfg.Gateway = load.Target{Name: "gateway", BaseURL: first.base + "/v1", Keys: []string{env.key}}
	cfg.Direct = directTarget(s, env.mockURL)
	cfg.GatewayPID = first.cmd.Process.Pid
	cfg.MetricsURL = first.base + "/metrics"
	return finishBench(ctx, cmd, cfg, out, func(ctx context.Context, rep *report.Report) error {
		fr := &report.Fleet{Instances: len(insts), TTLs: benchFleetTTL.Seconds(), HeartbeatS: benchFleetHeartbeat.Seconds()}
		fr.Owned, _ = owned(insts)
		var err error
		if fr.Requests, err = metricSum(first.base, "troupe_requests_total"); err != nil {
			return err
		}
		if fr.RemoteGrants, err = metricSum(first.base, "troupe_fleet_remote_grants_received_total"); err != nil {
			return err
		}
		if fr.Requests > 0 {
			fr.RemoteShare = fr.RemoteGrants / fr.Requests
		}
		last := insts[len(insts)-1]
		fr.KilledOwned = fr.Owned[len(fr.Owned)-1]
		fmt.Fprintf(progress, "bench: kill -9 of instance %d (pid %d, %d accounts)\n", len(insts)-1, last.cmd.Process.Pid, fr.KilledOwned)
		stop := make(chan struct{})
		errs, sent := map[string]int{}, 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		client := &http.Client{Timeout: 30 * time.Second}
		for range benchKillWorkers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					status := benchAsk(ctx, client, first.base, env.key, s.Model)
					mu.Lock()
					sent++
					if status != "200" {
						errs[status]++
					}
					mu.Unlock()
				}
			})
		}
		if err := last.cmd.Process.Kill(); err != nil {
			close(stop)
			wg.Wait()
			return err
		}
		recovered, err := waitOwned(insts[:len(insts)-1], 2*time.Minute)
		close(stop)
		wg.Wait()
		if err != nil {
			return err
		}
		fr.RecoveryS = recovered.Seconds()
		fr.KillWorkers, fr.KillRequests, fr.KillErrors = benchKillWorkers, sent, errs
		rep.Fleet = fr
		return nil
	})
}

// benchInstance is one instance of a fleet run.
type benchInstance struct {
	conf, dir, base string // base: http://127.0.0.1:PORT
	cmd             *exec.Cmd
}

// benchAsk sends one chat completion to base with key and returns the
// status ("200", "503", …) or "transport" when there was no answer.
func benchAsk(ctx context.Context, client *http.Client, base, key, model string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":`+strconv.Quote(model)+`,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return "transport"
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "transport"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// metricSum reads base's /metrics and returns the sum of every series of
// the metric name (any labels).
func metricSum(base, name string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench: %s/metrics: %s", base, resp.Status)
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("bench: %s/metrics has no %s", base, name)
	}
	return sum, nil
}

// clearBenchPrefix deletes the keys under prefix from the Redis at
// redisURL.
func clearBenchPrefix(redisURL, prefix string) error {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("bench: --redis: %w", err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("bench: clear the run's Redis keys: %w", err)
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("bench: clear the run's Redis keys: %w", err)
		}
	}
	return nil
}

// createBenchDB creates an empty database troupe_bench_<hex> on the
// PostgreSQL server of server (a postgres:// URL) and returns its URL and
// a function that drops it.
func createBenchDB(ctx context.Context, server string) (string, func(), error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("bench: --postgres must be a postgres:// URL")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, server)
	if err != nil {
		return "", nil, fmt.Errorf("bench: --postgres %s: %w", u.Redacted(), err)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	name := "troupe_bench_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("bench: create database %s: %w", name, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, server); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(context.Background())
		}
	}
	db := *u
	db.Path = "/" + name
	return db.String(), drop, nil
}
