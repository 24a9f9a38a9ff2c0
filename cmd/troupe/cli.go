package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/rediscache"
)

// withStore opens the configured storage for one command that reads it
// (keys list and the like): storage that does not exist yet is an error
// (needStorage), never created.
func withStore(cmd *cobra.Command, fn func(ctx context.Context, s storage.Store) error) error {
	return withExistingStore(cmd, func(ctx context.Context, _ *Config, s storage.Store) error { return fn(ctx, s) })
}

// withExistingStore is withStore for commands that also need the
// configuration, and for those that change what must already be stored
// (keys update, accounts remove): nothing to change in storage that does
// not exist.
func withExistingStore(cmd *cobra.Command, fn func(ctx context.Context, cfg *Config, s storage.Store) error) error {
	cfg, err := configFrom(cmd)
	if err != nil {
		return err
	}
	if err := needStorage(cfg); err != nil {
		return err
	}
	return openFor(cmd, cfg, fn)
}

// withConfigStore opens the configured storage for one command that adds
// to it (keys create, accounts add), creating the data directory and the
// database when needed.
func withConfigStore(cmd *cobra.Command, fn func(ctx context.Context, cfg *Config, s storage.Store) error) error {
	cfg, err := configFrom(cmd)
	if err != nil {
		return err
	}
	return openFor(cmd, cfg, fn)
}

// needStorage returns an error when cfg's embedded storage does not exist
// (no data directory, or none with a troupe.db): a command that reads
// storage must not create an empty one, say in ./data because
// TROUPE_DATA_DIR is not set in this shell, and then print an empty table
// as if the gateway had nothing. PostgreSQL and an SQLite dsn of its own
// are not checked (the dsn names them).
func needStorage(cfg *Config) error {
	if cfg.Storage.Driver == "postgres" || cfg.Storage.DSN != "" {
		return nil
	}
	point := "point at the gateway's with --data DIR, TROUPE_DATA_DIR=DIR or -c FILE (make demo's is ./data/demo)"
	if _, err := os.Stat(cfg.DataDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no data directory here: %s does not exist, so nothing is stored there yet (this command creates nothing); %s", cfg.DataDir, point)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "troupe.db")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no Troupe storage in %s (no troupe.db there; this command creates nothing); %s", cfg.DataDir, point)
	}
	return nil
}

// openFor opens cfg's storage for the command fn, with a one-minute limit.
func openFor(cmd *cobra.Command, cfg *Config, fn func(ctx context.Context, cfg *Config, s storage.Store) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
	defer cancel()
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(ctx, cfg, s)
}

func dataFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().String("data", "", "data directory for the embedded storage (default ./data)")
}

// announceKeys tells running gateways that an API key changed (msg says
// which), so that they drop their cached lookups at once. It needs a shared
// cache: with cache.driver redis it publishes on the "keys" channel; with the
// in-memory cache there is nobody to tell from another process and gateways
// see the change when their key cache expires (30 s). A failure is a
// warning, not an error: the change itself is stored.
func announceKeys(cmd *cobra.Command, cfg *Config, msg string) {
	if cfg.Cache.Driver != "redis" {
		if !strings.HasPrefix(msg, "created ") { // a new key needs no announcement: nobody cached it
			fmt.Fprintln(cmd.ErrOrStderr(), "# running gateways apply this within 30 s (their API-key cache); with cache.driver redis they apply it at once")
		}
		return
	}
	announce(cmd, cfg, admin.KeysChannel, msg, "30 s")
}

// announceAccounts tells running gateways that accounts changed, so that
// they read the account change feed at once (admin.AccountsChannel). With
// the in-memory cache nobody in another process can be told: gateways read
// the feed within 5 s (their poll). A failure is a warning: the change
// itself is stored.
func announceAccounts(cmd *cobra.Command, cfg *Config, msg string) {
	if cfg.Cache.Driver != "redis" {
		return
	}
	announce(cmd, cfg, admin.AccountsChannel, msg, "5 s")
}

// announce publishes msg on the cache's channel for running gateways (a
// Redis of cache.driver redis). A failure is one warning line on the
// command's stderr, saying which Redis could not be reached and when the
// gateways apply the change anyway (within): go-redis's own log line for
// the failed dial is not printed (rediscache.UseLogger with a logger that
// discards it).
func announce(cmd *cobra.Command, cfg *Config, channel, msg, within string) {
	rediscache.UseLogger(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	c, err := rediscache.New(ctx, cfg.Cache.URL, rediscache.Options{Prefix: cfg.Cache.Prefix})
	if err == nil {
		err = c.Publish(ctx, channel, msg)
		c.Close()
	}
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "# warning: running gateways were not told of this change: %s; they apply it within %s\n", cacheProblem(cfg.Cache.URL, err), within)
	}
}

// cacheProblem says in one phrase why the Redis at rawURL (its host and
// port; never its password) did not take a message: unreachable, with the
// last part of the cause ("connection refused", "i/o timeout"), or the
// error itself.
func cacheProblem(rawURL string, err error) string {
	where := "the cache"
	if u, perr := url.Parse(rawURL); perr == nil && u.Host != "" {
		where = "Redis at " + u.Host
	}
	msg := err.Error()
	if errors.Is(err, storage.ErrCacheUnavailable) {
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		return where + " is unreachable (" + msg + ")"
	}
	return where + ": " + msg
}

// keyLimitFlags are the flags shared by keys create and keys update.
type keyLimitFlags struct {
	group   string
	models  []string
	rpm     int64
	rpd     int64
	tpd     int64
	expires string
	weight  int
}

func (f *keyLimitFlags) register(c *cobra.Command, update bool) {
	fs := c.Flags()
	fs.StringVar(&f.group, "group", "", "routing group: the key uses only accounts of this group")
	fs.StringSliceVar(&f.models, "models", nil, "model allowlist, comma-separated (default: every model)")
	fs.Int64Var(&f.rpm, "rpm", 0, "requests per minute (0: unlimited)")
	fs.Int64Var(&f.rpd, "rpd", 0, "requests per UTC day (0: unlimited)")
	fs.Int64Var(&f.tpd, "tokens-per-day", 0, "input + output tokens per UTC day (0: unlimited)")
	help := "expiry: a duration from now (720h) or an RFC 3339 time (default: never)"
	if update {
		help = "new expiry: a duration from now (720h), an RFC 3339 time, or never"
	}
	fs.StringVar(&f.expires, "expires", "", help)
	fs.IntVar(&f.weight, "weight", 1, "fair-queue weight: turns per round for the key's waiters when the pool is saturated")
}

// apply sets the fields of k whose flags were given (all of them for a new key).
func (f *keyLimitFlags) apply(c *cobra.Command, k *storage.APIKey, now time.Time) error {
	fs := c.Flags()
	if fs.Changed("group") {
		k.Group = f.group
	}
	if fs.Changed("models") {
		k.Models = f.models
	}
	if fs.Changed("rpm") {
		k.Limits.RPM = f.rpm
	}
	if fs.Changed("rpd") {
		k.Limits.RPD = f.rpd
	}
	if fs.Changed("tokens-per-day") {
		k.Limits.TokensPerDay = f.tpd
	}
	if fs.Changed("expires") {
		exp, err := parseExpiry(f.expires, now)
		if err != nil {
			return err
		}
		k.ExpiresAt = exp
	}
	if fs.Changed("weight") {
		k.Weight = f.weight
		if err := storage.NormKeyWeight(k); err != nil {
			return fmt.Errorf("--weight: %w", err)
		}
	}
	return k.Limits.Validate()
}

// parseExpiry reads --expires: a positive duration from now, an RFC 3339
// time, or "never" (nil).
func parseExpiry(s string, now time.Time) (*time.Time, error) {
	switch s = strings.TrimSpace(s); s {
	case "never", "none", "":
		return nil, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return nil, fmt.Errorf("--expires %s: want a positive duration", s)
		}
		t := now.Add(d).UTC()
		return &t, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, fmt.Errorf("--expires %q: want a duration (720h), an RFC 3339 time (2027-01-31T00:00:00Z) or never", s)
	}
	t = t.UTC()
	return &t, nil
}

// findKey returns the key whose ID, or else whose name, is idOrName.
func findKey(ctx context.Context, s storage.Store, idOrName string) (storage.APIKey, error) {
	keys, err := s.ListAPIKeys(ctx)
	if err != nil {
		return storage.APIKey{}, err
	}
	for _, k := range keys {
		if k.ID == idOrName {
			return k, nil
		}
	}
	for _, k := range keys {
		if k.Name == idOrName {
			return k, nil
		}
	}
	return storage.APIKey{}, fmt.Errorf("api key %q: %w", idOrName, storage.ErrNotFound)
}

// keyState is "enabled", "disabled" or "expired".
func keyState(k storage.APIKey, now time.Time) string {
	switch {
	case k.Disabled:
		return "disabled"
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return "expired"
	}
	return "enabled"
}

func limitText(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// yesNo is "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// keyRow is a key's line in keys list (and after keys update): NAME PREFIX
// GROUP MODELS RPM RPD TOKENS/DAY EXPIRES STATE ADMIN CREATED; "-" is none
// or unlimited, "*" every model, ADMIN is yes or no.
func keyRow(k storage.APIKey, now time.Time) string {
	models := strings.Join(k.Models, ",")
	if models == "" {
		models = "*"
	}
	expires := "never"
	if k.ExpiresAt != nil {
		expires = k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return strings.Join([]string{k.Name, k.Prefix + "…", orDash(k.Group), models, limitText(k.Limits.RPM), limitText(k.Limits.RPD),
		limitText(k.Limits.TokensPerDay), expires, keyState(k, now), yesNo(k.Admin), k.CreatedAt.UTC().Format(time.RFC3339)}, "\t")
}

const keyHeader = "NAME\tPREFIX\tGROUP\tMODELS\tRPM\tRPD\tTOKENS/DAY\tEXPIRES\tSTATE\tADMIN\tCREATED"

func keysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Manage client API keys"}
	dataFlag(cmd)
	cmd.AddCommand(keysCreateCmd(), keysUpdateCmd(), keysListCmd(), keysRevokeCmd())
	return cmd
}

// keysCreateCmd is troupe keys create.
func keysCreateCmd() *cobra.Command {
	var name, user string
	var disabled, admin bool
	var cf keyLimitFlags
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key and print its secret (shown once)",
		Example: `  troupe keys create --name my-app
  troupe keys create --name batch --rpm 60 --rpd 10000 --tokens-per-day 2000000 --expires 720h --models gpt-4.1-mini,gpt-5.5 --group batch
  troupe keys create --name ops --admin
  troupe keys create --name alice-laptop --user alice`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return fmt.Errorf("--name is required")
			}
			return withConfigStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				secret, k, err := gateway.NewKey(name)
				if err != nil {
					return err
				}
				if err := cf.apply(cmd, &k, time.Now()); err != nil {
					return err
				}
				k.Disabled = disabled
				k.Admin = admin
				if user != "" {
					if admin {
						return fmt.Errorf("--admin and --user: a user's key cannot be an admin key")
					}
					u, err := s.GetUser(ctx, user)
					if err != nil {
						return fmt.Errorf("--user %q: %w (troupe users list shows the users)", user, err)
					}
					k.UserID = u.ID
				}
				k, err = s.CreateAPIKey(ctx, k)
				if errors.Is(err, storage.ErrConflict) {
					return fmt.Errorf("a key named %q already exists (troupe keys list shows the keys): pick another --name", name)
				}
				if err != nil {
					return fmt.Errorf("create key %q: %w", name, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				fmt.Fprintln(cmd.ErrOrStderr(), secretNotice(k))
				announceKeys(cmd, cfg, "created "+k.ID)
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "key name (unique)")
	create.Flags().BoolVar(&disabled, "disabled", false, "create the key disabled")
	create.Flags().BoolVar(&admin, "admin", false, "create an admin key: it may call /api/admin and ask for decision traces")
	create.Flags().StringVar(&user, "user", "", "the user (name, email or id) who owns the key and pays for its requests; none: an operator key")
	cf.register(create, false)
	return create
}

// keysUpdateCmd is troupe keys update.
func keysUpdateCmd() *cobra.Command {
	var uf keyLimitFlags
	var rename string
	var disable, enable, grantAdmin, revokeAdmin bool
	update := &cobra.Command{
		Use:   "update NAME|ID",
		Short: "Change an API key's limits, models, group, expiry, state or admin right",
		Long: `Change the given fields of an API key; fields whose flags are not given keep
their values. A limit of 0 is unlimited; --models "" allows every model;
--expires never removes the expiry; --admin and --no-admin grant and revoke
the admin right (/api/admin, decision traces). The secret never changes.`,
		Example: `  troupe keys update my-app --rpm 120 --tokens-per-day 0
  troupe keys update my-app --disable
  troupe keys update my-app --enable --expires 720h
  troupe keys update ops --admin`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			if disable && enable {
				return fmt.Errorf("--disable and --enable are mutually exclusive")
			}
			if grantAdmin && revokeAdmin {
				return fmt.Errorf("--admin and --no-admin are mutually exclusive")
			}
			changed := false
			for _, f := range []string{"rpm", "rpd", "tokens-per-day", "models", "group", "expires", "name", "disable", "enable", "admin", "no-admin", "weight"} {
				changed = changed || fs.Changed(f)
			}
			if !changed {
				return fmt.Errorf("nothing to update: give at least one of --rpm, --rpd, --tokens-per-day, --models, --group, --expires, --name, --disable, --enable, --admin, --no-admin, --weight")
			}
			return withExistingStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				k, err := findKey(ctx, s, args[0])
				if err != nil {
					return err
				}
				if err := uf.apply(cmd, &k, time.Now()); err != nil {
					return err
				}
				if fs.Changed("name") {
					k.Name = rename
				}
				if disable {
					k.Disabled = true
				}
				if enable {
					k.Disabled = false
				}
				if grantAdmin {
					k.Admin = true
				}
				if revokeAdmin {
					k.Admin = false
				}
				k, err = s.UpdateAPIKey(ctx, k)
				if err != nil {
					return fmt.Errorf("update key %q: %w", args[0], err)
				}
				if err := printKeys(cmd.OutOrStdout(), time.Now(), k); err != nil {
					return err
				}
				announceKeys(cmd, cfg, "updated "+k.ID)
				return nil
			})
		},
	}
	uf.register(update, true)
	update.Flags().StringVar(&rename, "name", "", "new name")
	update.Flags().BoolVar(&disable, "disable", false, "refuse the key (401) until --enable")
	update.Flags().BoolVar(&enable, "enable", false, "accept the key again")
	update.Flags().BoolVar(&grantAdmin, "admin", false, "let the key call /api/admin and ask for decision traces")
	update.Flags().BoolVar(&revokeAdmin, "no-admin", false, "take the admin right away from the key")
	return update
}

// keysListCmd is troupe keys list.
func keysListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List API keys with their limits and state (never their secrets)",
		Long: `List API keys: name, display prefix, group, model allowlist (* = every model),
limits (- = unlimited), expiry, state (enabled, disabled or expired), admin right
(yes or no) and creation time.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				keys, err := s.ListAPIKeys(ctx)
				if err != nil {
					return err
				}
				return printKeys(cmd.OutOrStdout(), time.Now(), keys...)
			})
		},
	}
}

// keysRevokeCmd is troupe keys revoke.
func keysRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME|ID",
		Short: "Delete an API key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withExistingStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				if err := s.DeleteAPIKey(ctx, args[0]); err != nil {
					return err
				}
				announceKeys(cmd, cfg, "revoked "+args[0])
				return nil
			})
		},
	}
}

// printKeys writes keys as the table of troupe keys list, states as of now.
func printKeys(out io.Writer, now time.Time, keys ...storage.APIKey) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, keyHeader)
	for _, k := range keys {
		fmt.Fprintln(w, keyRow(k, now))
	}
	return w.Flush()
}

func accountsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "accounts", Short: "Manage upstream accounts"}
	dataFlag(cmd)
	var ac AccountConfig
	var replace bool
	add := &cobra.Command{
		Use:   "add",
		Short: "Add an account (--replace: replace the account of that name)",
		Long: `Add an account. An account of the same name is refused, as keys create refuses
a key's; --replace replaces it instead (keeping its ID): the account becomes
exactly what the flags say, flags left out taking their defaults. With
--replace and no such account, the account is added.`,
		Example: `  troupe accounts add --name oai-1 --provider openai --api-key sk-... --models gpt-4.1-mini --max-concurrency 8
  troupe accounts add --name cx-1 --provider codex --access-token eyJ... --account-id 0000-... --models gpt-5.5
  troupe accounts add --name claude-1 --provider anthropic --api-key sk-ant-... --models claude-sonnet-4-5
  troupe accounts add --replace --name oai-1 --provider openai --api-key sk-... --max-concurrency 4`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ac.Name == "" || !storage.Provider(ac.Provider).Valid() {
				if ac.Name == "" {
					return fmt.Errorf("--name is required")
				}
				return fmt.Errorf("--provider %q: want codex, openai, openai_compat or anthropic", ac.Provider)
			}
			if err := credentialFlagsGiven(ac); err != nil {
				return err
			}
			if err := ac.check(); err != nil {
				return fmt.Errorf("account %s: %w", ac.Name, err)
			}
			return withConfigStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				existing, err := accountNamed(ctx, s, ac.Name)
				if err != nil {
					return err
				}
				if existing != nil && !replace {
					return fmt.Errorf("an account named %q already exists (troupe accounts list shows the accounts): pick another --name, or give --replace to replace it (the flags left out take their defaults)", ac.Name)
				}
				a, err := s.PutAccount(ctx, ac.account())
				if err != nil {
					return err
				}
				if existing != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "# replaced account %q (%s)\n", a.Name, a.ID)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", a.ID, a.Name)
				announceAccounts(cmd, cfg, "put "+a.ID)
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
	f.IntVar(&ac.MaxConcurrency, "max-concurrency", defaultMaxConcurrency, "in-flight requests allowed at once")
	f.StringVar(&ac.Group, "group", "", "routing group")
	f.StringSliceVar(&ac.Tags, "tags", nil, "routing tags")
	f.IntVar(&ac.Priority, "priority", 0, "routing priority (higher first, where a policy honours it)")
	f.BoolVar(&ac.Disabled, "disabled", false, "add the account disabled")
	f.BoolVar(&replace, "replace", false, "replace the account of this name, if any, with this one (default: refuse a name in use)")
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
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Name, a.Provider, strings.Join(a.Models, ","), concurrencyColumn(a.MaxConcurrency), a.Group, state, a.ID)
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
			return withExistingStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				if err := s.DeleteAccount(ctx, args[0]); err != nil {
					return err
				}
				announceAccounts(cmd, cfg, "delete "+args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(add, list, remove, resealCmd())
	cmd.AddCommand(accountsImportCmd(), accountsExportCmd()) // cli_import.go
	return cmd
}

// accountNamed returns the stored account named name, or nil when there
// is none.
func accountNamed(ctx context.Context, s storage.Store, name string) (*storage.Account, error) {
	accs, err := s.ListAccounts(ctx)
	if err != nil {
		return nil, err
	}
	for i := range accs {
		if accs[i].Name == name {
			return &accs[i], nil
		}
	}
	return nil, nil
}

// credentialFlagsGiven refuses an account whose provider's credential is
// empty: an API key for openai, openai_compat and anthropic, an access or
// refresh token for codex. Stored without one, the account would only fail
// at its first request (upstream.ErrMissingCredentials); an empty value most
// often comes from an unset shell variable (--api-key "$OPENAI_API_KEY").
func credentialFlagsGiven(ac AccountConfig) error {
	if storage.Provider(ac.Provider) == storage.ProviderCodex {
		if strings.TrimSpace(ac.Credentials.AccessToken) == "" && strings.TrimSpace(ac.Credentials.RefreshToken) == "" {
			return fmt.Errorf("account %s: a codex account needs --access-token or --refresh-token (both are empty); for ChatGPT logins, troupe accounts import ~/.codex/auth.json", ac.Name)
		}
		return nil
	}
	if strings.TrimSpace(ac.APIKey) == "" {
		return fmt.Errorf("account %s: --api-key is empty: %s account needs its API key (is the variable you passed set?)", ac.Name, article(string(ac.Provider)))
	}
	return nil
}

func resealCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reseal",
		Short: "Re-seal every account's credentials with the current master key (key rotation)",
		Long: `Re-save every account whose credentials are sealed with one of
storage.previous_master_keys, so that they are sealed with storage.master_key,
and check that every account then opens with the master key alone. Accounts
already sealed with the master key are left as they are, so running it again
changes nothing. Prints the counts. See "Credentials at rest and key rotation"
in docs/storage.md for the whole procedure.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFrom(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			res, err := reseal(ctx, cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%d accounts: %d re-sealed with key %s, %d already sealed with it\n", res.total, res.resealed, res.keyID, res.current)
			if res.hasPrevious {
				fmt.Fprintln(out, "every account opens with storage.master_key alone: storage.previous_master_keys can be removed")
			}
			return nil
		},
	}
}

// resealResult is what reseal did.
type resealResult struct {
	keyID                    string // id of the master key (storage.KeyID)
	total, resealed, current int
	hasPrevious              bool // previous keys were configured (and are no longer needed)
}

// reseal re-saves every account that is not sealed with the master key, so
// that it is, then checks that every account opens with the master key alone.
// A value's key is found by opening it with a store that holds only the
// master key: ErrUnseal means an older key sealed it.
func reseal(ctx context.Context, cfg *Config) (resealResult, error) {
	if err := needStorage(cfg); err != nil {
		return resealResult{}, err
	}
	current, previous, err := masterKeys(cfg)
	if err != nil {
		return resealResult{}, err
	}
	all, err := storage.NewSealer(current, previous...)
	if err != nil {
		return resealResult{}, fmt.Errorf("master keys: %w", err)
	}
	only, err := storage.NewSealer(current)
	if err != nil {
		return resealResult{}, fmt.Errorf("master key: %w", err)
	}
	res := resealResult{keyID: only.KeyID(), hasPrevious: len(previous) > 0}
	s, err := openStoreWith(ctx, cfg, all)
	if err != nil {
		return res, err
	}
	defer s.Close()
	accs, err := s.ListAccounts(ctx)
	if errors.Is(err, storage.ErrUnseal) {
		return res, fmt.Errorf("%w\nan account is sealed with a key that is neither storage.master_key nor in storage.previous_master_keys: add that key to storage.previous_master_keys", err)
	}
	if err != nil {
		return res, err
	}
	res.total = len(accs)
	if len(previous) == 0 {
		// Every account opened, and the master key is the only key.
		res.current = res.total
		return res, nil
	}
	cur, err := openStoreWith(ctx, cfg, only)
	if err != nil {
		return res, err
	}
	defer cur.Close()
	for _, a := range accs {
		_, err := cur.GetAccount(ctx, a.ID)
		switch {
		case err == nil:
			res.current++
			continue
		case errors.Is(err, storage.ErrNotFound): // removed meanwhile
			res.total--
			continue
		case !errors.Is(err, storage.ErrUnseal):
			return res, err
		}
		// Re-read just before writing, so that a change made meanwhile is kept.
		fresh, err := s.GetAccount(ctx, a.ID)
		if errors.Is(err, storage.ErrNotFound) {
			res.total--
			continue
		}
		if err != nil {
			return res, err
		}
		if _, err := s.PutAccount(ctx, fresh); err != nil {
			return res, fmt.Errorf("reseal account %s: %w", fresh.Name, err)
		}
		res.resealed++
	}
	if _, err := cur.ListAccounts(ctx); err != nil {
		return res, fmt.Errorf("after re-sealing %d accounts, some still need a previous key (added meanwhile with an old configuration?); run reseal again: %w", res.resealed, err)
	}
	return res, nil
}

func migrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply storage migrations and exit",
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Opening the store applies pending migrations (checksummed, in
			// order); a new data directory is made, as serve makes it.
			return withConfigStore(cmd, func(context.Context, *Config, storage.Store) error {
				fmt.Fprintln(cmd.OutOrStdout(), "migrations applied")
				return nil
			})
		},
	}
	dataFlag(cmd)
	return cmd
}

// article returns word with its indefinite article: "an openai", "a codex".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// secretNotice is the one line, for stderr, that goes with a new key's
// secret printed on stdout. It names the key (names are unique): when the secret is captured
// (TROUPE_API_KEY=$(troupe keys create …)), the notices of several keys
// created in a row must still say which secret each is about.
func secretNotice(k storage.APIKey) string {
	return fmt.Sprintf("# API key %q: its secret, printed on stdout, is shown this once; store it now, Troupe keeps only its hash", k.Name)
}
