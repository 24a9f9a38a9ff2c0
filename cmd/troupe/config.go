package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/troupe-gw/troupe/hygiene"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
	"github.com/troupe-gw/troupe/upstream"
)

// Config is troupe's configuration: defaults, then the YAML file, then
// TROUPE_* environment variables (TROUPE_ plus the key path upper-cased with
// "." and "-" as "_", e.g. TROUPE_STORAGE_DRIVER for storage.driver), then
// command-line flags. docs/configuration.md lists every key.
type Config struct {
	// Mode is "development" (the default) or "production", which refuses to
	// start with default or empty secrets (checkProduction).
	Mode    string `koanf:"mode"`
	Listen  string `koanf:"listen"`
	DataDir string `koanf:"data_dir"`
	Log     struct {
		Level  string `koanf:"level"`  // debug, info, warn, error
		Format string `koanf:"format"` // text or json
	} `koanf:"log"`
	Storage struct {
		Driver    string `koanf:"driver"`     // sqlite (the embedded default) or postgres
		DSN       string `koanf:"dsn"`        // sqlite: file path, default {data_dir}/troupe.db; postgres: a postgres:// URL
		MasterKey string `koanf:"master_key"` // AES-256 key (base64 or hex) sealing upstream credentials; default: {data_dir}/master.key, created on first start
		// PreviousMasterKeys are older master keys, newest first, kept during a
		// key rotation: values sealed with them still open; writes (and
		// "troupe accounts reseal") seal with MasterKey. Env: a comma-separated list.
		PreviousMasterKeys []string `koanf:"previous_master_keys"`
		// UsageJournalMaxBytes bounds {data_dir}/usage.journal, where usage
		// records wait while storage does not take them (docs/storage.md).
		UsageJournalMaxBytes int64 `koanf:"usage_journal_max_bytes"`
	} `koanf:"storage"`
	Cache struct {
		Driver string `koanf:"driver"` // memory (the embedded default) or redis
		URL    string `koanf:"url"`    // redis: redis://host:port/db
		Prefix string `koanf:"prefix"` // redis key prefix, so deployments can share a server
	} `koanf:"cache"`
	// Fleet is the membership of a deployment of several instances
	// (docs/fleet.md); it runs with cache.driver redis.
	Fleet struct {
		Addr      string        `koanf:"addr"`      // internal address announced to the other instances; default the listen address, its host filled in
		TTL       time.Duration `koanf:"ttl"`       // life of an announcement: a dead instance leaves the set this long after its last heartbeat
		Heartbeat time.Duration `koanf:"heartbeat"` // heartbeat period, shorter than ttl
		// Ownership runs each account only on the instance that owns it
		// (rendezvous hashing, a fenced lease in Redis); with cache.driver redis.
		Ownership bool `koanf:"ownership"`
	} `koanf:"fleet"`
	Gateway struct {
		MaxBodyBytes   int           `koanf:"max_body_bytes"`
		MaxAttempts    int           `koanf:"max_attempts"`
		MaxWait        time.Duration `koanf:"max_wait"`
		RequestTimeout time.Duration `koanf:"request_timeout"`
		HeaderTimeout  time.Duration `koanf:"header_timeout"`
		// UpstreamClient is the HTTP client of upstream calls: auto, nethttp
		// or http1 (upstream.ParseClientMode; docs/configuration.md).
		UpstreamClient string `koanf:"upstream_client"`
		// Failover before commit (see docs/architecture.md).
		FirstTokenTimeout time.Duration `koanf:"first_token_timeout"`
		NonStreamTimeout  time.Duration `koanf:"nonstream_timeout"`
		HeartbeatInterval time.Duration `koanf:"heartbeat_interval"`
		FailoverBudget    time.Duration `koanf:"failover_budget"`
		HoldBufferBytes   int           `koanf:"hold_buffer_bytes"`
		// QuotaProbe is how often an account cooling for quota is probed
		// (a 1-token request; 0s or less: never). docs/configuration.md.
		QuotaProbe time.Duration `koanf:"quota_probe_interval"`
		// Client connections (docs/configuration.md, "Client connections").
		Connections struct {
			Max           int           `koanf:"max"`        // 0: automatic (from the fd limit); -1: no cap
			MaxPerIP      int           `koanf:"max_per_ip"` // 0: automatic (a quarter of max); -1: no cap
			HeaderTimeout time.Duration `koanf:"header_timeout"`
			ReadTimeout   time.Duration `koanf:"read_timeout"`
			IdleTimeout   time.Duration `koanf:"idle_timeout"`
		} `koanf:"connections"`
		// Affinity and the Responses WebSocket (docs/affinity.md, docs/websocket.md).
		SessionAffinityTTL time.Duration `koanf:"session_affinity_ttl"`
		WebSocket          struct {
			Upstream             string        `koanf:"upstream"` // auto, always or never
			MaxConnections       int           `koanf:"max_connections"`
			MaxConnectionsPerKey int           `koanf:"max_connections_per_key"`
			MaxMessageBytes      int           `koanf:"max_message_bytes"`
			IdleTimeout          time.Duration `koanf:"idle_timeout"` // upstream connections
			ClientIdleTimeout    time.Duration `koanf:"client_idle_timeout"`
			ClientWriteTimeout   time.Duration `koanf:"client_write_timeout"`
			MaxTranscriptBytes   int64         `koanf:"max_transcript_bytes"` // all client connections' transcripts together
		} `koanf:"websocket"`
	} `koanf:"gateway"`
	Policies struct {
		Dir    string `koanf:"dir"`    // directory of NAME.lua files, watched for changes ("" = built-ins only)
		Active string `koanf:"active"` // the routing policy: DIR/NAME.lua, else the built-in NAME
	} `koanf:"policies"`
	// Tracing is OpenTelemetry tracing (docs/observability.md); the
	// standard OTEL_* environment variables apply too.
	Tracing struct {
		Enabled  bool   `koanf:"enabled"`
		Endpoint string `koanf:"endpoint"` // OTLP collector base URL; "": OTEL_EXPORTER_OTLP_* or the SDK default
		Protocol string `koanf:"protocol"` // http/protobuf, http/json or grpc; "": OTEL_EXPORTER_OTLP_PROTOCOL or http/protobuf
		// SampleRatio is the share of new traces kept (parent-based: a
		// client's sampled traceparent is always followed).
		SampleRatio float64 `koanf:"sample_ratio"`
		// RecordContent records request and answer bodies on request spans,
		// each cut at ContentMaxBytes; off, no message content is recorded.
		RecordContent   bool `koanf:"record_content"`
		ContentMaxBytes int  `koanf:"content_max_bytes"`
	} `koanf:"tracing"`
	// Hygiene is the account hygiene rule (docs/admin-api.md#account-hygiene).
	Hygiene struct {
		Action            string        `koanf:"action"`             // off, flag or disable
		UnauthorizedAfter time.Duration `koanf:"unauthorized_after"` // unauthorized this long trips the rule
		RateLimitedAfter  time.Duration `koanf:"rate_limited_after"` // rate limited at every sweep this long trips it; 0s: never
		Interval          time.Duration `koanf:"interval"`           // between sweeps
	} `koanf:"hygiene"`
	Aliases  map[string]string `koanf:"aliases"`
	Accounts []AccountConfig   `koanf:"accounts"`
	Codex    CodexConfig       `koanf:"codex"`
	Admin    struct {
		// Password is the first admin user's password, used only when
		// storage has no admin user yet (TROUPE_ADMIN_PASSWORD); unset, a
		// random one is generated and printed once (not in production).
		Password string `koanf:"password"`
	} `koanf:"admin"`
}

// AccountConfig is an account declared in the config file. Declared accounts
// are upserted into storage by name at every start.
type AccountConfig struct {
	Name           string              `koanf:"name"`
	Provider       string              `koanf:"provider"`
	BaseURL        string              `koanf:"base_url"`
	APIKey         string              `koanf:"api_key"`
	Credentials    storage.Credentials `koanf:"credentials"`
	Models         []string            `koanf:"models"`
	MaxConcurrency int                 `koanf:"max_concurrency"`
	Group          string              `koanf:"group"`
	Tags           []string            `koanf:"tags"`
	Priority       int                 `koanf:"priority"`
	Disabled       bool                `koanf:"disabled"`
}

func defaults() map[string]any {
	m := map[string]any{
		"mode":                            modeDevelopment,
		"admin.password":                  "",
		"listen":                          "127.0.0.1:8080",
		"data_dir":                        "./data",
		"log.level":                       "info",
		"log.format":                      "text",
		"storage.driver":                  "sqlite",
		"storage.dsn":                     "",
		"storage.master_key":              "",
		"storage.usage_journal_max_bytes": journal.DefaultMaxBytes,
		"cache.driver":                    "memory",
		"policies.dir":                    "",
		"policies.active":                 defaultPolicy,
		"cache.url":                       "",
		"cache.prefix":                    "troupe:",
		"fleet.addr":                      "",
		"fleet.ttl":                       "5s",
		"fleet.heartbeat":                 "1s",
		"fleet.ownership":                 false,
		"gateway.max_body_bytes":          16 << 20,
		"gateway.max_attempts":            3,
		"gateway.max_wait":                "10s",
		"gateway.request_timeout":         "10m",
		"gateway.header_timeout":          "0s",
		"gateway.upstream_client":         "auto",
		"gateway.nonstream_timeout":       "5m",
		"gateway.first_token_timeout":     "60s",
		"gateway.heartbeat_interval":      "15s",
		"gateway.failover_budget":         "60s",
		"gateway.hold_buffer_bytes":       1 << 20,
		"gateway.quota_probe_interval":    "1m",
		// Client connections.
		"gateway.connections.max":            0,
		"gateway.connections.max_per_ip":     0,
		"gateway.connections.header_timeout": "10s",
		"gateway.connections.read_timeout":   "60s",
		"gateway.connections.idle_timeout":   "120s",
		// Affinity and the Responses WebSocket.
		"gateway.session_affinity_ttl":              "1h",
		"gateway.websocket.upstream":                "auto",
		"gateway.websocket.max_connections":         10000,
		"gateway.websocket.max_connections_per_key": 64,
		"gateway.websocket.max_message_bytes":       16 << 20,
		"gateway.websocket.idle_timeout":            "5m",
		"gateway.websocket.client_idle_timeout":     "15m",
		"gateway.websocket.client_write_timeout":    "30s",
		"gateway.websocket.max_transcript_bytes":    1 << 30, // gateway.DefaultWSMaxTranscriptBytes
		// OpenTelemetry tracing (off unless enabled here or by OTEL_* variables).
		"tracing.enabled":           false,
		"tracing.endpoint":          "",
		"tracing.protocol":          "",
		"tracing.sample_ratio":      1.0,
		"tracing.record_content":    false,
		"tracing.content_max_bytes": 4096,
		// Account hygiene (off unless hygiene.action says flag or disable).
		"hygiene.action":             "off",
		"hygiene.unauthorized_after": "10m",
		"hygiene.rate_limited_after": "6h",
		"hygiene.interval":           "1m",
	}
	codexDefaults(m)
	return m
}

// loadConfig reads defaults, the YAML file at path (skipped when path is ""),
// and the environment. A missing file named explicitly is an error.
func loadConfig(path string, environ func() []string) (*Config, error) {
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaults(), "."), nil); err != nil {
		return nil, err
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	known := envKeys()
	if environ == nil {
		environ = os.Environ
	}
	if err := k.Load(env.Provider(".", env.Opt{
		Prefix:      "TROUPE_",
		EnvironFunc: environ,
		TransformFunc: func(name, v string) (string, any) {
			if path, ok := envLists[name]; ok {
				return path, splitList(v)
			}
			return known[name], v // unknown TROUPE_* names map to "" and are ignored
		},
	}), nil); err != nil {
		return nil, err
	}
	var c Config
	// Unknown keys are errors, so a misspelt key in the file does not pass silently.
	dc := &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(), mapstructure.TextUnmarshallerHookFunc()),
		WeaklyTypedInput: true,
		ErrorUnused:      true,
	}
	if err := k.UnmarshalWithConf("", &c, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: dc}); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, c.validate()
}

// envLists are the list keys that may also come from the environment, as a
// comma-separated list (other lists and maps come from the file only).
var envLists = map[string]string{
	"TROUPE_STORAGE_PREVIOUS_MASTER_KEYS": "storage.previous_master_keys",
	"TROUPE_CODEX_PROXIES":                "codex.proxies",
}

// splitList splits a comma-separated environment value, trimming spaces and
// dropping empty items ("" is the empty list).
func splitList(v string) []string {
	out := []string{}
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// envKeys maps every scalar key path of Config to its environment name.
func envKeys() map[string]string {
	out := map[string]string{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for f := range t.Fields() {
			tag := f.Tag.Get("koanf")
			if tag == "" {
				continue
			}
			path := prefix + tag
			switch f.Type.Kind() {
			case reflect.Struct:
				if f.Type != reflect.TypeFor[time.Duration]() {
					walk(f.Type, path+".")
					continue
				}
			case reflect.Slice, reflect.Map:
				continue // lists and maps come from the file
			}
			name := "TROUPE_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(path))
			out[name] = path
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

func (c *Config) validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen must not be empty"))
	} else if l, err := hostPort("listen", c.Listen); err != nil {
		errs = append(errs, err)
	} else {
		c.Listen = l
	}
	errs = append(errs, c.checkMode()...)
	if _, err := upstream.ParseClientMode(c.Gateway.UpstreamClient); err != nil {
		errs = append(errs, fmt.Errorf("gateway.upstream_client %q: want auto, nethttp or http1", c.Gateway.UpstreamClient))
	}
	switch c.Storage.Driver {
	case "sqlite":
		if strings.Contains(c.Storage.DSN, "://") {
			errs = append(errs, fmt.Errorf("storage.dsn %q looks like a URL, but storage.driver is sqlite (a file path)", redactDSN(c.Storage.DSN)))
		}
	case "postgres":
		if c.Storage.DSN == "" {
			errs = append(errs, errors.New("storage.dsn is required with storage.driver postgres"))
		}
	default:
		errs = append(errs, fmt.Errorf("storage.driver %q: want sqlite or postgres", c.Storage.Driver))
	}
	switch c.Cache.Driver {
	case "memory":
	case "redis":
		if c.Cache.URL == "" {
			errs = append(errs, errors.New("cache.url is required with cache.driver redis"))
		}
	default:
		errs = append(errs, fmt.Errorf("cache.driver %q: want memory or redis", c.Cache.Driver))
	}
	if c.Fleet.Heartbeat <= 0 || c.Fleet.Heartbeat >= c.Fleet.TTL {
		errs = append(errs, fmt.Errorf("fleet.heartbeat (%v) must be positive and shorter than fleet.ttl (%v)", c.Fleet.Heartbeat, c.Fleet.TTL))
	} else if c.Fleet.Ownership && c.Fleet.Heartbeat >= c.Fleet.TTL*3/4 {
		errs = append(errs, fmt.Errorf("fleet.ownership: fleet.heartbeat (%v) must be shorter than 3/4 of fleet.ttl (%v), the fence of an ownership lease", c.Fleet.Heartbeat, c.Fleet.TTL))
	}
	if c.Policies.Active == "" {
		errs = append(errs, errors.New("policies.active must name a policy"))
	}
	switch c.Gateway.WebSocket.Upstream {
	case "auto", "always", "never":
	default:
		errs = append(errs, fmt.Errorf("gateway.websocket.upstream %q: want auto, always or never", c.Gateway.WebSocket.Upstream))
	}
	if c.Gateway.Connections.Max < -1 || c.Gateway.Connections.MaxPerIP < -1 {
		errs = append(errs, errors.New("gateway.connections.max and max_per_ip: want a count, 0 (automatic) or -1 (no cap)"))
	}
	for name, d := range map[string]time.Duration{"header_timeout": c.Gateway.Connections.HeaderTimeout,
		"read_timeout": c.Gateway.Connections.ReadTimeout, "idle_timeout": c.Gateway.Connections.IdleTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("gateway.connections.%s %s: want a positive duration", name, d))
		}
	}
	errs = append(errs, c.gatewayNegatives()...)
	switch c.Tracing.Protocol {
	case "", "http/protobuf", "http/json", "grpc":
	default:
		errs = append(errs, fmt.Errorf("tracing.protocol %q: want http/protobuf, http/json or grpc", c.Tracing.Protocol))
	}
	if c.Tracing.SampleRatio < 0 || c.Tracing.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio %v: want a number from 0 to 1", c.Tracing.SampleRatio))
	}
	if c.Tracing.RecordContent && c.Tracing.ContentMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("tracing.content_max_bytes %d: want a positive size with record_content", c.Tracing.ContentMaxBytes))
	}
	if err := c.hygieneRule().Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level %q: want debug, info, warn or error", c.Log.Level))
	}
	if err := c.Codex.validate(); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for i, a := range c.Accounts {
		if a.Name == "" {
			errs = append(errs, fmt.Errorf("accounts[%d]: name is required", i))
		} else if seen[a.Name] {
			errs = append(errs, fmt.Errorf("accounts[%d]: duplicate name %q", i, a.Name))
		}
		seen[a.Name] = true
		if !storage.Provider(a.Provider).Valid() {
			errs = append(errs, fmt.Errorf("accounts[%d] (%s): provider %q: want codex, openai, openai_compat or anthropic", i, a.Name, a.Provider))
		}
		if err := a.check(); err != nil {
			errs = append(errs, fmt.Errorf("accounts[%d] (%s): %w", i, a.Name, err))
		}
	}
	return errors.Join(errs...)
}

// gatewayNegatives refuses a negative gateway size, count or duration, naming its
// key. The front takes 0 or less as "the default" (gateway.Config), so a
// typo such as request_timeout: -5s ran silently with the 10m default;
// 0 still means the default (for quota_probe_interval, never).
func (c *Config) gatewayNegatives() []error {
	g := &c.Gateway
	var errs []error
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"max_wait", g.MaxWait}, {"request_timeout", g.RequestTimeout}, {"header_timeout", g.HeaderTimeout},
		{"first_token_timeout", g.FirstTokenTimeout}, {"nonstream_timeout", g.NonStreamTimeout},
		{"heartbeat_interval", g.HeartbeatInterval}, {"failover_budget", g.FailoverBudget},
		{"quota_probe_interval", g.QuotaProbe}, {"session_affinity_ttl", g.SessionAffinityTTL},
		{"websocket.idle_timeout", g.WebSocket.IdleTimeout}, {"websocket.client_idle_timeout", g.WebSocket.ClientIdleTimeout},
		{"websocket.client_write_timeout", g.WebSocket.ClientWriteTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("gateway.%s %s: want a duration of 0 (the default) or more", d.key, d.v))
		}
	}
	for _, n := range []struct {
		key string
		v   int64
	}{
		{"max_body_bytes", int64(g.MaxBodyBytes)}, {"max_attempts", int64(g.MaxAttempts)}, {"hold_buffer_bytes", int64(g.HoldBufferBytes)},
		{"websocket.max_connections", int64(g.WebSocket.MaxConnections)}, {"websocket.max_connections_per_key", int64(g.WebSocket.MaxConnectionsPerKey)},
		{"websocket.max_message_bytes", int64(g.WebSocket.MaxMessageBytes)}, {"websocket.max_transcript_bytes", g.WebSocket.MaxTranscriptBytes},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("gateway.%s %d: want 0 (the default) or more", n.key, n.v))
		}
	}
	return errs
}

// maxAccountConcurrency is the largest max_concurrency of an account, as the
// admin API allows it (admin/accounts_io.go).
const maxAccountConcurrency = 10_000

// check refuses what the admin API refuses of an account's settings, so the
// config file and troupe accounts add store nothing it would not: a base_url
// that is not an absolute http or https URL (it could never be called; the
// URL is not quoted, it may hold a secret) and a max_concurrency outside 0
// (meaning 1) to maxAccountConcurrency.
func (a AccountConfig) check() error {
	if a.BaseURL != "" && !upstream.ValidBaseURL(a.BaseURL) {
		return errors.New("base_url: want an absolute http or https URL, such as https://api.example.com/v1")
	}
	if a.MaxConcurrency < 0 || a.MaxConcurrency > maxAccountConcurrency {
		return fmt.Errorf("max_concurrency %d: want 0 (meaning 1) to %d", a.MaxConcurrency, maxAccountConcurrency)
	}
	return nil
}

// account converts a declared account to its storage form.
func (a AccountConfig) account() storage.Account {
	cred := a.Credentials
	if a.APIKey != "" {
		cred.APIKey = a.APIKey
	}
	return storage.Account{
		Name: a.Name, Provider: storage.Provider(a.Provider), BaseURL: a.BaseURL, Credentials: cred,
		Models: a.Models, MaxConcurrency: a.MaxConcurrency, Group: a.Group, Tags: a.Tags,
		Priority: a.Priority, Disabled: a.Disabled,
	}
}

// redactDSN hides a password in a DSN quoted in an error.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// defaultPolicy is policies.active when nothing sets it.
const defaultPolicy = "smart"

// defaultMaxConcurrency is an account's in-flight limit when its
// configuration gives none, in the config file and on the command line alike.
const defaultMaxConcurrency = storage.DefaultMaxConcurrency

// hygieneRule is the account hygiene rule of c.
func (c *Config) hygieneRule() hygiene.Rule {
	h := c.Hygiene
	return hygiene.Rule{Action: h.Action, Unauthorized: h.UnauthorizedAfter, RateLimited: h.RateLimitedAfter, Interval: h.Interval}
}
