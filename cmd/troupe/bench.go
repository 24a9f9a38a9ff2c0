package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/bench/harness"
	"github.com/troupe-gw/troupe/bench/load"
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
	"github.com/troupe-gw/troupe/bench/scenarios"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"go.yaml.in/yaml/v3"
)

// benchFlags are the flags of troupe bench.
type benchFlags struct {
	scenario  string
	accounts  int
	rounds    int
	out       string
	target    string
	key       string
	mockURL   string
	pid       int
	troupeBin string
	keep      bool
	postgres  string
	redis     string
	// mockListen and gatewayListen are the addresses of the mock fleet and
	// the gateway troupe bench starts ("": a free port of 127.0.0.1).
	mockListen    string
	gatewayListen string
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a gateway beside a direct baseline (docs/bench.md)",
		Long: `Run a load-test scenario (a shipped one by name: ` + strings.Join(scenarios.Names(), ", ") + `;
or a YAML file) and write report.json, report.html and a text summary.

By default it starts the mock fleet ("troupe mock --scenario") and a gateway
("troupe serve" on a temporary data directory, with the scenario's accounts
and API keys) as separate processes on 127.0.0.1, and measures every phase
directly against the mock and through the gateway, interleaved.

With --target URL --key KEY it measures a running gateway instead (any
OpenAI-compatible one); add --mock URL (a "troupe mock --scenario" the
gateway points at) for the direct baseline, and --pid for its CPU and memory.

With --mock URL and no --target it starts only the gateway, in front of that
running mock fleet, so that Troupe and other gateways measured with --target
share one fleet (the peers scenario, docs/bench.md).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, cmd, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.scenario, "scenario", "steady", "shipped scenario name or YAML file")
	fs.IntVar(&f.accounts, "accounts", 0, "accounts behind the gateway (default: the scenario's, else 2,000)")
	fs.IntVar(&f.rounds, "rounds", 0, "interleaved direct/gateway rounds per phase (default: the scenario's)")
	fs.StringVar(&f.out, "out", "", "output directory (default ./bench-out/SCENARIO-TIME)")
	fs.StringVar(&f.target, "target", "", "base URL of a running gateway to measure, e.g. http://127.0.0.1:8080/v1")
	fs.StringVar(&f.key, "key", "", "API key for --target")
	fs.StringVar(&f.mockURL, "mock", "", "base URL of a running mock fleet of the scenario (troupe mock --scenario), e.g. http://127.0.0.1:9090/v1: with --target the one behind it, for the direct baseline; without, the gateway troupe bench starts points at it instead of a mock of its own")
	fs.IntVar(&f.pid, "pid", 0, "with --target: the gateway's process id, for CPU and memory")
	fs.StringVar(&f.mockListen, "mock-listen", "", "address of the mock fleet troupe bench starts, e.g. 127.0.0.1:9090 (default: a free port of 127.0.0.1)")
	fs.StringVar(&f.gatewayListen, "gateway-listen", "", "address of the gateway troupe bench starts, e.g. 127.0.0.1:8081 (default: a free port of 127.0.0.1; one instance only)")
	fs.StringVar(&f.troupeBin, "troupe-bin", "", "troupe binary to start the mock and the gateway with (default: this one)")
	fs.BoolVar(&f.keep, "keep", false, "keep the temporary directory (data, configs, logs of the processes)")
	fs.StringVar(&f.postgres, "postgres", "", "for a scenario of several instances (gateway.instances, e.g. fleet): a PostgreSQL server URL, postgres://USER:PASS@HOST:PORT/DB; the run creates a database of its own on it and drops it at the end")
	fs.StringVar(&f.redis, "redis", "", "for a scenario of several instances: the Redis URL they share, redis://HOST:PORT/N (keys under a prefix of the run's own)")
	cmd.AddCommand(benchCompareCmd())
	return cmd
}

// benchCompareCmd is `troupe bench compare A B…`.
func benchCompareCmd() *cobra.Command {
	var htmlOut string
	cmd := &cobra.Command{
		Use:   "compare REPORT REPORT…",
		Short: "Compare the verdicts of several bench runs (report.json files or their directories)",
		Long: `Read two or more report.json files (or the directories troupe bench wrote them
into) and print one table: per phase the added latency and time to first content
at p50 and p99, throughput against direct and gateway CPU per request; then
memory, memory per open stream, failover cost and errors. Every run after the
first gets a column of its change against the first; a change smaller than
either run's noise floor is marked noise. --html also writes the table as a page.`,
		Example: `  troupe bench compare bench-out/steady-20261201T080000Z bench-out/steady-20261202T080000Z
  troupe bench compare before/report.json after/report.json --html compare.html`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reps []*report.Report
			for _, a := range args {
				r, err := report.Read(a)
				if err != nil {
					return err
				}
				reps = append(reps, r)
			}
			c := report.Compare(runNames(args), reps)
			fmt.Fprint(cmd.OutOrStdout(), c.Text())
			if htmlOut == "" {
				return nil
			}
			f, err := os.Create(htmlOut)
			if err != nil {
				return err
			}
			if err := c.HTML(f); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", htmlOut)
			return nil
		},
	}
	cmd.Flags().StringVar(&htmlOut, "html", "", "also write the table as an HTML page to this file")
	return cmd
}

// runNames names compared runs by their directory (report.json's parent,
// else the path), numbered when two would read the same.
func runNames(paths []string) []string {
	names := make([]string, len(paths))
	count := map[string]int{}
	for i, p := range paths {
		p = filepath.Clean(p)
		if filepath.Base(p) == "report.json" {
			p = filepath.Dir(p)
		}
		names[i] = filepath.Base(p)
		count[names[i]]++
	}
	for i := range names {
		if count[names[i]] > 1 {
			names[i] = fmt.Sprintf("%d:%s", i+1, names[i])
		}
	}
	return names
}

// loadScenario reads a shipped scenario by name or a YAML file.
func loadScenario(ref string) (*scenario.Scenario, []byte, error) {
	if !strings.HasSuffix(ref, ".yaml") && !strings.HasSuffix(ref, ".yml") && !strings.ContainsRune(ref, os.PathSeparator) {
		src, err := scenarios.Source(ref)
		if err != nil {
			return nil, nil, err
		}
		s, err := scenario.Parse(src)
		return s, src, err
	}
	return scenario.Load(ref)
}

func runBench(ctx context.Context, cmd *cobra.Command, f benchFlags) error {
	s, src, err := loadScenario(f.scenario)
	if err != nil {
		return err
	}
	if f.accounts > 0 {
		s.Accounts = f.accounts
	}
	if f.rounds > 0 {
		s.Rounds = f.rounds
	}
	if err := s.Validate(); err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = filepath.Join("bench-out", s.Name+"-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	progress := cmd.ErrOrStderr()
	cfg := harness.Config{
		Scenario:     s,
		ScenarioYAML: src,
		Versions:     report.Versions{Troupe: version, Go: runtime.Version()},
		Progress:     progress,
	}
	for _, l := range []*string{&f.mockListen, &f.gatewayListen} {
		if *l == "" {
			continue
		}
		flag := "--mock-listen"
		if l == &f.gatewayListen {
			flag = "--gateway-listen"
		}
		if *l, err = hostPort(flag, *l); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if err := f.checkListen(s); err != nil {
		return err
	}
	if f.target != "" && s.Gateway.Instances > 1 {
		return fmt.Errorf("bench: scenario %s starts %d instances itself; --target measures one running gateway", s.Name, s.Gateway.Instances)
	}
	if s.Gateway.Instances > 1 {
		return runFleetBench(ctx, cmd, f, s, cfg, out)
	}
	if f.target != "" {
		if f.key == "" {
			return errors.New("--target needs --key")
		}
		cfg.Mode, cfg.TargetDesc, cfg.GatewayPID = "target", f.target, f.pid
		cfg.Gateway = load.Target{Name: "gateway", BaseURL: strings.TrimRight(f.target, "/"), Keys: []string{f.key}}
		if f.mockURL != "" {
			cfg.Direct = directTarget(s, strings.TrimRight(f.mockURL, "/"))
		} else {
			cfg.Notes = append(cfg.Notes, "no --mock: no direct baseline, so no added latency")
		}
		if s.HasHold() {
			cfg.HoldKey = f.key
			cfg.Notes = append(cfg.Notes, "--target: hold phases use --key (the target's accounts, not the scenario's slow hold accounts)")
		}
		if s.Failover != nil {
			s.Failover = nil
			cfg.Notes = append(cfg.Notes, "--target: failover is measured only on a gateway the harness starts (it needs the scenario's failing account groups)")
		}
		return finishBench(ctx, cmd, cfg, out)
	}

	bin := f.troupeBin
	if bin == "" {
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
	env, err := startBenchEnv(ctx, bin, tmp, s, strings.TrimRight(f.mockURL, "/"), f.mockListen, f.gatewayListen, progress)
	if env != nil {
		defer env.stop(progress)
	}
	if err != nil {
		return err
	}
	cfg.Mode = "self"
	if env.mock != nil {
		cfg.TargetDesc = fmt.Sprintf("troupe serve (pid %d) in front of troupe mock (pid %d), %d accounts", env.gateway.Process.Pid, env.mock.Process.Pid, s.Accounts)
	} else {
		cfg.TargetDesc = fmt.Sprintf("troupe serve (pid %d) in front of the running mock fleet at %s, %d accounts", env.gateway.Process.Pid, env.mockURL, s.Accounts)
		cfg.Notes = append(cfg.Notes, "--mock: the gateway points at a mock fleet this run did not start ("+env.mockURL+")")
	}
	cfg.Gateway = load.Target{Name: "gateway", BaseURL: env.gatewayURL, Keys: []string{env.key}}
	cfg.Direct = directTarget(s, env.mockURL)
	cfg.GatewayPID = env.gateway.Process.Pid
	cfg.MetricsURL = strings.TrimSuffix(env.gatewayURL, "/v1") + "/metrics"
	cfg.HoldKey, cfg.FailoverKeys = env.holdKey, env.failoverKeys
	return finishBench(ctx, cmd, cfg, out)
}

// finishBench probes the WebSocket path (dropping the scenario's
// responses_ws phases, with a note, when the gateway does not serve it),
// runs the harness and writes the report.
//
// after, when given, runs once the harness has finished without error and
// may add to the report before it is written.
func finishBench(ctx context.Context, cmd *cobra.Command, cfg harness.Config, out string, after ...func(context.Context, *report.Report) error) error {
	cfg.WebSocket = probeWebSocket(ctx, cfg.Gateway)
	s := cfg.Scenario
	var kept []scenario.Phase
	for _, p := range s.Phases {
		if p.API != scenario.ResponsesWS || cfg.WebSocket.Measured {
			kept = append(kept, p)
		} else {
			cfg.Notes = append(cfg.Notes, "skipped phase "+p.Name+": "+cfg.WebSocket.Reason)
		}
	}
	if len(kept) == len(s.Phases) && cfg.WebSocket.Measured && !hasWSPhase(s) {
		cfg.WebSocket = report.WebSocket{Reason: "the scenario has no responses_ws phase"}
	}
	s.Phases = kept
	rep, err := harness.Run(ctx, cfg)
	if rep == nil {
		return err
	}
	for _, a := range after {
		if err == nil {
			err = a(ctx, rep)
		}
	}
	if werr := rep.Write(out); werr != nil {
		return werr
	}
	fmt.Fprint(cmd.OutOrStdout(), rep.Text())
	fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", filepath.Join(out, "report.json"))
	return err
}

func hasWSPhase(s *scenario.Scenario) bool {
	for _, p := range s.Phases {
		if p.API == scenario.ResponsesWS {
			return true
		}
	}
	return false
}

// directTarget is the mock fleet at base (ending in /v1) with the tokens of
// the default group's healthy accounts.
func directTarget(s *scenario.Scenario, base string) *load.Target {
	t := &load.Target{Name: "direct", BaseURL: base}
	for _, m := range s.Fleet() {
		if m.Group == "" && m.Healthy {
			t.Keys = append(t.Keys, m.Account.Token)
		}
	}
	if len(t.Keys) == 0 {
		return nil
	}
	return t
}

// probeWebSocket asks the gateway for a WebSocket upgrade on GET
// /v1/responses: Measured is true when it is accepted (the responses_ws
// phases can run), else Reason says why not.
func probeWebSocket(ctx context.Context, t load.Target) report.WebSocket {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.BaseURL+"/responses", nil)
	if err != nil {
		return report.WebSocket{Reason: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+t.Keys[0])
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return report.WebSocket{Reason: "probe failed: " + err.Error()}
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return report.WebSocket{Measured: true}
	}
	return report.WebSocket{Reason: fmt.Sprintf("the gateway does not serve GET /v1/responses over WebSocket (the upgrade probe got %d)", resp.StatusCode)}
}

// benchEnv is the processes troupe bench started.
type benchEnv struct {
	mock, gateway *exec.Cmd
	// fleet is the other instances of a run of several (gateway is the
	// first).
	fleet        []*exec.Cmd
	mockURL      string // .../v1
	gatewayURL   string // .../v1
	key, holdKey string
	failoverKeys map[int][]string
}

// startBenchEnv starts the mock fleet and the gateway as child processes of
// bin, with the scenario's accounts and API keys provisioned in a fresh
// data directory under tmp. When mockURL (http://HOST:PORT/v1) is not empty
// it starts no mock: the gateway points at that running fleet, which must
// serve the scenario's accounts. On error the returned env (if not nil)
// holds what was started, to stop.
// mockListen and gwListen are the addresses to start them on ("": a free
// port of 127.0.0.1).
func startBenchEnv(ctx context.Context, bin, tmp string, s *scenario.Scenario, mockURL, mockListen, gwListen string, progress io.Writer) (*benchEnv, error) {
	scen, err := yaml.Marshal(s)
	if err != nil {
		return nil, err
	}
	scenPath := filepath.Join(tmp, "scenario.yaml")
	if err := os.WriteFile(scenPath, scen, 0o644); err != nil {
		return nil, err
	}
	env := &benchEnv{}
	childEnv := benchChildEnv()
	var addr string
	if mockURL != "" {
		if addr, err = checkRunningMock(ctx, s, mockURL); err != nil {
			return env, err
		}
		env.mockURL = mockURL
		fmt.Fprintf(progress, "bench: using the running mock fleet on %s\n", addr)
	} else {
		if addr, err = env.startMock(bin, tmp, scenPath, mockListen, childEnv); err != nil {
			return env, err
		}
		fmt.Fprintf(progress, "bench: mock fleet on %s (pid %d)\n", addr, env.mock.Process.Pid)
	}

	// Provision the gateway's storage: accounts and API keys.
	listen := gwListen
	if listen == "" {
		if listen, err = freeAddr(); err != nil {
			return env, err
		}
	}
	confPath, err := writeBenchConfig(tmp, listen, s)
	if err != nil {
		return env, err
	}
	start := time.Now()
	if err := provisionBench(ctx, confPath, s, addr, env); err != nil {
		return env, err
	}
	fmt.Fprintf(progress, "bench: provisioned %d accounts in %.1fs\n", len(s.Fleet()), time.Since(start).Seconds())

	gwLog, err := os.Create(filepath.Join(tmp, "gateway.log"))
	if err != nil {
		return env, err
	}
	env.gateway = exec.Command(bin, "serve", "-c", confPath)
	env.gateway.Env, env.gateway.Stdout, env.gateway.Stderr = childEnv, gwLog, gwLog
	if err := env.gateway.Start(); err != nil {
		return env, fmt.Errorf("bench: start gateway: %w", err)
	}
	env.gatewayURL = "http://" + listen + "/v1"
	if err := waitReady(ctx, "http://"+listen+"/readyz", 120*time.Second); err != nil {
		return env, fmt.Errorf("bench: gateway: %w (log: %s)", err, gwLog.Name())
	}
	fmt.Fprintf(progress, "bench: gateway on %s (pid %d)\n", listen, env.gateway.Process.Pid)
	return env, nil
}

// checkRunningMock checks that mockURL (http://HOST:PORT/v1) is a running
// mock fleet of scenario s — its first and last default-group accounts'
// tokens are accepted on GET /models — and returns its HOST:PORT, the
// address the gateway's accounts are given.
func checkRunningMock(ctx context.Context, s *scenario.Scenario, mockURL string) (string, error) {
	rest, ok := strings.CutPrefix(mockURL, "http://")
	addr, ok2 := strings.CutSuffix(rest, "/v1")
	if !ok || !ok2 || addr == "" || strings.Contains(addr, "/") {
		return "", fmt.Errorf("bench: --mock %q: want the mock fleet's base URL, http://HOST:PORT/v1", mockURL)
	}
	var tokens []string
	for _, m := range s.Fleet() {
		if m.Group == "" {
			tokens = append(tokens, m.Account.Token)
		}
	}
	if len(tokens) == 0 {
		return "", errors.New("bench: the scenario has no default-group accounts")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, tok := range []string{tokens[0], tokens[len(tokens)-1]} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, mockURL+"/models", nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", fmt.Errorf("bench: --mock %s: %w", mockURL, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("bench: --mock %s refuses the scenario's account token %q (%s): is it `troupe mock --scenario %s`?", mockURL, tok, resp.Status, s.Name)
		}
	}
	return addr, nil
}

// startMock starts the mock fleet of the scenario at scenPath as a child
// process, logging to tmp/mock.log, and returns the address it listens on
// (it prints MOCK_ADDR=host:port once it does).
// listen is its address ("": a free port of 127.0.0.1).
func (e *benchEnv) startMock(bin, tmp, scenPath, listen string, childEnv []string) (string, error) {
	mockLog, err := os.Create(filepath.Join(tmp, "mock.log"))
	if err != nil {
		return "", err
	}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	// Run in tmp: the mock keeps its pid file in ./data/mock of its working
	// directory, so benches started from one directory (and a troupe mock
	// of the user's) do not refuse each other. A working directory, not
	// --data, so that an older binary (--troupe-bin) runs as well.
	if bin, err = filepath.Abs(bin); err != nil {
		return "", err
	}
	if scenPath, err = filepath.Abs(scenPath); err != nil {
		return "", err
	}
	e.mock = exec.Command(bin, "mock", "--listen", listen, "--scenario", scenPath)
	e.mock.Env, e.mock.Stderr, e.mock.Dir = childEnv, mockLog, tmp
	stdout, err := e.mock.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := e.mock.Start(); err != nil {
		return "", fmt.Errorf("bench: start mock: %w", err)
	}
	addr, err := readAddr(stdout, "MOCK_ADDR=", 60*time.Second)
	if err != nil {
		return "", fmt.Errorf("bench: mock fleet: %w (log: %s)", err, mockLog.Name())
	}
	go io.Copy(io.Discard, stdout)
	e.mockURL = "http://" + addr + "/v1"
	return addr, nil
}

// writeBenchConfig writes the gateway's configuration for scenario s to
// tmp/troupe.yaml (listening on listen, its data and the failover policy
// under tmp) and returns its path.
func writeBenchConfig(tmp, listen string, s *scenario.Scenario) (string, error) {
	data := filepath.Join(tmp, "data")
	policyDir := filepath.Join(tmp, "policies")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(policyDir, scenario.FailoverPolicyName+".lua"), []byte(scenario.FailoverPolicy), 0o644); err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`listen: %q
data_dir: %q
log: {level: warn}
policies: {dir: %q, active: %q}
gateway:
  max_attempts: %d
  first_token_timeout: %s
  nonstream_timeout: %s
`, listen, data, policyDir, s.Gateway.Policy, s.Gateway.MaxAttempts, s.Gateway.FirstTokenTimeout, s.Gateway.FirstTokenTimeout)
	confPath := filepath.Join(tmp, "troupe.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return "", err
	}
	return confPath, nil
}

// provisionBench stores the scenario's accounts (pointing at the mock on
// mockAddr) and creates the API keys: one for the default group, one for
// the hold group, one per failover group.
func provisionBench(ctx context.Context, confPath string, s *scenario.Scenario, mockAddr string, env *benchEnv) error {
	cfg, err := loadConfig(confPath, func() []string { return nil })
	if err != nil {
		return err
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	for _, m := range s.Fleet() {
		a := storage.Account{
			Name:           m.Account.Name,
			Provider:       storage.ProviderOpenAI,
			BaseURL:        "http://" + mockAddr + "/v1",
			Credentials:    storage.Credentials{APIKey: m.Account.Token},
			Models:         m.Account.Models,
			MaxConcurrency: s.Gateway.MaxConcurrency,
			Group:          m.Group,
			Priority:       m.Priority,
		}
		if _, err := store.PutAccount(ctx, a); err != nil {
			return fmt.Errorf("bench: account %s: %w", a.Name, err)
		}
	}
	newKey := func(name, group string) (string, error) {
		secret, k, err := gateway.NewKey(name)
		if err != nil {
			return "", err
		}
		k.Group = group
		if _, err := store.CreateAPIKey(ctx, k); err != nil {
			return "", fmt.Errorf("bench: api key %s: %w", name, err)
		}
		return secret, nil
	}
	if env.key, err = newKey("bench", ""); err != nil {
		return err
	}
	if s.HasHold() {
		if env.holdKey, err = newKey("bench-hold", scenario.HoldGroup); err != nil {
			return err
		}
	}
	if f := s.Failover; f != nil {
		env.failoverKeys = map[int][]string{}
		for _, k := range f.Ks {
			for i := range f.Requests {
				g := scenario.FailoverGroup(k, i)
				key, err := newKey("bench-"+g, g)
				if err != nil {
					return err
				}
				env.failoverKeys[k] = append(env.failoverKeys[k], key)
			}
		}
	}
	return nil
}

// stop ends the gateway (the instances of a fleet run), then the mock (SIGTERM, then SIGKILL after 30 s).
func (e *benchEnv) stop(progress io.Writer) {
	for _, c := range append(append([]*exec.Cmd{e.gateway}, e.fleet...), e.mock) {
		if c == nil || c.Process == nil {
			continue
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			fmt.Fprintf(progress, "bench: pid %d did not stop, killing it\n", c.Process.Pid)
			_ = c.Process.Kill()
			<-done
		}
	}
}

// benchChildEnv is this process's environment without TROUPE_* variables, so
// the children run on the configuration the harness wrote.
func benchChildEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TROUPE_") {
			out = append(out, kv)
		}
	}
	return out
}

// readAddr reads lines from r until one starts with prefix and returns the
// rest of it.
func readAddr(r io.Reader, prefix string, timeout time.Duration) (string, error) {
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				found <- rest
				return
			}
		}
		close(found)
	}()
	select {
	case a, ok := <-found:
		if !ok {
			return "", errors.New("exited before printing its address")
		}
		return a, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("no address after %s", timeout)
	}
}

// checkListen refuses --mock-listen and --gateway-listen where troupe
// bench starts no such process (--target; --mock for the mock; a scenario
// of several instances for the gateway) and, before anything starts, an
// address that is taken (listenFront's error, naming the flag).
func (f benchFlags) checkListen(s *scenario.Scenario) error {
	var noMock, noGateway string // why no such process is started
	switch {
	case f.target != "":
		noMock, noGateway = "--target measures a running gateway", "--target measures a running gateway"
	case f.mockURL != "":
		noMock = "--mock uses a running mock fleet"
	}
	if noGateway == "" && s.Gateway.Instances > 1 {
		noGateway = fmt.Sprintf("scenario %s starts %d instances, each on a free port", s.Name, s.Gateway.Instances)
	}
	for _, l := range [...]struct{ flag, addr, none string }{
		{"--mock-listen", f.mockListen, noMock},
		{"--gateway-listen", f.gatewayListen, noGateway},
	} {
		if l.addr == "" {
			continue
		}
		if l.none != "" {
			return fmt.Errorf("bench: %s: %s, so troupe bench starts none to put there", l.flag, l.none)
		}
		ln, err := listenFront(l.addr)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", l.flag, err)
		}
		ln.Close()
	}
	return nil
}

// freeAddr returns a 127.0.0.1 address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s (%s)", timeout, last)
}
