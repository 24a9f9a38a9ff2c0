// Package storage is Troupe's persistence contract: accounts, API keys, usage
// records and their hourly rollups, settings and routing policies with their
// history, behind narrow interfaces with one backend per driver.
//
// The embedded backend (package storage/sqlite) needs no set-up; the
// production backend (package storage/postgres, with Redis as the cache)
// implements the same interfaces, and both pass the same conformance suite
// (package storage/storagetest). Every method is safe for concurrent use and
// honours ctx cancellation. Errors wrap ErrNotFound, ErrConflict or
// ErrInvalid where the contract names them, and never contain secrets.
//
// Text is stored as PostgreSQL can hold it, by every backend alike: names,
// settings and policies that are not valid UTF-8 or hold a NUL byte are
// refused with ErrInvalid (and looking them up finds nothing), while usage
// records, whose model name a client chooses, are stored with U+FFFD in
// place of the bad bytes rather than failing their batch.
package storage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned by lookups whose subject does not exist.
var ErrNotFound = errors.New("storage: not found")

// ErrConflict is returned when a unique field (account name, key hash) is taken.
var ErrConflict = errors.New("storage: conflict")

// ErrStale is returned by a conditional write (Account.IfVersion,
// User.IfUpdatedAt) when the record changed, or was deleted, since the
// version the writer had read: nothing is written. The admin API answers
// it with 409 (docs/admin-api.md, "Concurrent edits").
var ErrStale = errors.New("storage: changed since it was read")

// Provider names an upstream protocol family. The set is closed; see upstream.
type Provider string

// Providers known to Troupe.
const (
	ProviderCodex        Provider = "codex"         // ChatGPT OAuth accounts on the Codex backend (Responses over SSE)
	ProviderOpenAI       Provider = "openai"        // OpenAI API keys: Chat Completions and Responses
	ProviderOpenAICompat Provider = "openai_compat" // any base URL speaking Chat Completions
	ProviderAnthropic    Provider = "anthropic"     // Anthropic API keys: Messages
)

// Valid reports whether p is one of the known providers.
func (p Provider) Valid() bool {
	switch p {
	case ProviderCodex, ProviderOpenAI, ProviderOpenAICompat, ProviderAnthropic:
		return true
	}
	return false
}

// Credentials are an account's upstream secrets. They are plaintext only in
// memory; backends encrypt them at rest. Never log or render them.
type Credentials struct {
	APIKey       string `json:"api_key,omitempty" yaml:"api_key" koanf:"api_key"`                   // openai, openai_compat, anthropic
	AccessToken  string `json:"access_token,omitempty" yaml:"access_token" koanf:"access_token"`    // codex: OAuth bearer token (JWT)
	RefreshToken string `json:"refresh_token,omitempty" yaml:"refresh_token" koanf:"refresh_token"` // codex: OAuth refresh token
	IDToken      string `json:"id_token,omitempty" yaml:"id_token" koanf:"id_token"`                // codex: OpenID id_token
	AccountID    string `json:"account_id,omitempty" yaml:"account_id" koanf:"account_id"`          // codex: chatgpt-account-id header
	// Email and Plan describe a codex login (from the import file or the
	// id_token claims); sealed with the rest, as an email is personal data.
	Email string `json:"email,omitempty" yaml:"email" koanf:"email"` // codex: the login's email
	Plan  string `json:"plan,omitempty" yaml:"plan" koanf:"plan"`    // codex: ChatGPT plan type ("plus", "pro", …)
	// Proxy is the account's own upstream proxy URL (http://, https:// or
	// socks5://, possibly with user:password), sealed since it may hold a
	// password; "" uses the configured pool or none.
	Proxy string `json:"proxy,omitempty" yaml:"proxy" koanf:"proxy"`
}

// DefaultMaxConcurrency is the in-flight limit an account gets when it is
// created without one: from the config file, the CLI (accounts add, import)
// and the admin API (create, import) alike. An explicit 0 means 1.
const DefaultMaxConcurrency = 4

// Account is one upstream account in the pool.
type Account struct {
	ID             string      // stable identifier, assigned by the backend on first Put when empty
	Name           string      // unique, operator-facing (e.g. "demo-0042")
	Provider       Provider    // upstream protocol family
	BaseURL        string      // e.g. https://api.openai.com/v1 or https://chatgpt.com/backend-api/codex
	Credentials    Credentials // encrypted at rest
	Models         []string    // models served; empty means any model
	MaxConcurrency int         // in-flight requests allowed at once; <= 0 means 1 (a new account without one gets DefaultMaxConcurrency)
	Group          string      // routing group ("" is the default group)
	Tags           []string    // free-form routing tags
	Priority       int         // higher is preferred by policies that honour it
	Disabled       bool        // kept in storage but out of the pool
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Version is the account feed's version at the account's last change
	// (AccountChanges): it grows with every PutAccount of any account, so
	// a reader that has seen version v has seen this account's last change
	// when Version <= v. 0 for an account unchanged since before the feed
	// (schema version 10). Set by the backend; ignored by PutAccount.
	Version int64
	// IfVersion, when positive, makes PutAccount conditional: it writes
	// only when an account of this Name exists and its Version is
	// IfVersion (the version the writer read), else it returns an error
	// wrapping ErrStale and writes nothing. The check and the write are one
	// transaction, ordered with every other account change. 0: no check.
	// Never stored, never set by a read.
	IfVersion int64
	// Sealed holds the credentials as sealed at rest when the account was
	// read without opening them (AccountChanges with open false), and
	// Credentials is then zero; OpenCredentials opens it. "" when
	// Credentials are open. Ignored by PutAccount.
	Sealed string
}

// AccountChanges is one read of the account change feed: what changed
// after a version a reader had seen, up to Version.
type AccountChanges struct {
	// Accounts changed (inserted or updated) after the version asked,
	// ordered by Version; every account when it was 0.
	Accounts []Account
	// Deleted are the IDs of the accounts deleted after the version asked
	// (none when it was 0, or Full), and not put again since.
	Deleted []string
	// Full reports that Accounts holds every account and Deleted nothing:
	// the version asked was 0, or older than the oldest deletion the feed
	// still has a tombstone for (PruneAccountTombstones pruned one after
	// it). A reader that knew accounts before then drops every one not in
	// Accounts, since a deletion it had not read may be gone.
	Full bool
	// Version is the feed's version as of this read: pass it to the next
	// AccountChanges. Never less than the version asked (a reader never
	// goes back), and at least 1.
	Version int64
}

// APIKey is a client key for /v1. Only the SHA-256 of the secret is stored.
type APIKey struct {
	ID        string     // stable identifier
	Name      string     // operator-facing label, unique
	Hash      string     // lowercase hex SHA-256 of the full secret ("sk-troupe-…")
	Prefix    string     // first characters of the secret, safe to display (e.g. "sk-troupe-AbC1")
	Group     string     // routing group the key's requests are restricted to ("" = any)
	Models    []string   // model allowlist; empty means every model
	Disabled  bool       // a disabled key is refused with 401
	ExpiresAt *time.Time // nil means never
	CreatedAt time.Time
	Limits    KeyLimits // per-key limits; zero fields mean unlimited
	Admin     bool      // may call /api/admin and ask for decision traces
	// Weight is the key's share of the fair queue when the pool is
	// saturated: its waiters get Weight turns per round against 1 for a
	// default key. Stored 1 when 0 (the default); ErrInvalid when negative.
	Weight int
	// UserID is the User who owns the key and pays for its requests
	// (column user_id); "" for an operator key, which is never charged.
	UserID string
	// Revision counts the key's writes: 1 when created, one more on every
	// UpdateAPIKey. Set by the backend.
	Revision int64
	// IfRevision, when positive, makes UpdateAPIKey conditional: it writes
	// only when the stored key's Revision is IfRevision (the revision the
	// writer read), else it returns an error wrapping ErrStale and writes
	// nothing. Never stored, never set by a read.
	IfRevision int64
}

// KeyLimits are a key's request limits, enforced at the gateway from the
// cache's counters (exact across instances when the cache is shared). Stored
// in the api_keys columns rpm, rpd and tokens_per_day.
type KeyLimits struct {
	RPM          int64 // requests per minute (fixed one-minute windows); 0 = unlimited
	RPD          int64 // requests per day (UTC days); 0 = unlimited
	TokensPerDay int64 // input + output tokens per UTC day; 0 = unlimited
}

// Validate reports whether l can be stored: no limit may be negative. The
// error wraps ErrInvalid.
func (l KeyLimits) Validate() error {
	if l.RPM < 0 || l.RPD < 0 || l.TokensPerDay < 0 {
		return fmt.Errorf("%w: api key limits must not be negative (rpm %d, rpd %d, tokens per day %d)", ErrInvalid, l.RPM, l.RPD, l.TokensPerDay)
	}
	return nil
}

// UsageRecord is one served (or finally failed) client request.
type UsageRecord struct {
	RequestID       string        // gateway-assigned id, unique
	At              time.Time     // when the request started (UTC)
	KeyID           string        // APIKey.ID
	AccountID       string        // Account.ID that served it ("" if none)
	Model           string        // model requested by the client
	Route           string        // client endpoint, e.g. "chat.completions", "responses"
	Stream          bool          // client asked for a stream
	Status          int           // HTTP status returned to the client
	ErrorClass      string        // failure class when the request failed ("" on success)
	Attempts        int           // upstream attempts made (1 without failover)
	Latency         time.Duration // start to last byte
	TTFT            time.Duration // start to first content byte; 0 if none
	InputTokens     int64
	CachedTokens    int64 // part of InputTokens served from the prompt cache
	OutputTokens    int64
	ReasoningTokens int64 // part of OutputTokens spent on reasoning
	// Estimated is true when the token counts are the gateway's estimate,
	// not the upstream's report: a stream cut (by the client, at shutdown,
	// or by a broken upstream) before the upstream sent its usage. Input is
	// then the upstream's count when it came (Anthropic's message_start),
	// else estimated from the request; output is estimated from the content
	// relayed (docs/storage.md#estimated-usage). Column estimated.
	Estimated bool

	// CacheWriteTokens is the part of InputTokens written to the prompt
	// cache (Anthropic's cache_creation_input_tokens); column cache_write_tokens.
	CacheWriteTokens int64
	// UserID is the key's owner (User.ID), "" for an operator key; column user_id.
	UserID string
	// Cost is what the request costs the user, in micro-units, computed by
	// the gateway from this record's token counts and the price in force
	// (billing.Cost); column cost. InsertUsage charges it to UserID's
	// balance (a LedgerCharge row with this RequestID) in the transaction
	// that stores the record, so a record stored once is charged once.
	Cost int64

	// Decision is the compact trace of how the serving account was chosen
	// (column decision; format in docs/policies.md#decision-traces); "" when
	// no account was picked.
	Decision string
}

// UsageRollup is one row of the hourly rollup (table usage_hourly): the sums
// of the usage records of one hour × key × account × model × status. The
// record's hour is its At truncated to the UTC hour.
type UsageRollup struct {
	Hour            time.Time // start of the UTC hour
	KeyID           string
	AccountID       string
	Model           string
	Status          int
	Requests        int64 // number of records
	InputTokens     int64
	CachedTokens    int64
	OutputTokens    int64
	ReasoningTokens int64
	// Cost is the sum of the records' Cost: what the group's requests cost
	// their users, in micro-units of the billing currency (SettingCurrency;
	// 0 for requests no price applied to, such as an operator key's); column
	// cost. Each record counts as InsertUsage stored it (clamped to [0,
	// MaxAmount] by UsageRecord.Bound). Rows of hours before migration 13
	// count only the records still stored when it ran.
	Cost int64
}

// UsageQuery selects rollup rows: those whose Hour is at or after From and
// before To. A zero From or To leaves that side open; empty string fields
// match everything, others must be equal.
type UsageQuery struct {
	From, To  time.Time
	KeyID     string
	AccountID string
	Model     string
}

// PolicyVersion is one saved version of a routing policy (tables policies and
// policy_versions). Versions of a name count up from 1.
type PolicyVersion struct {
	Name        string
	Version     int
	Source      string // Lua source
	CreatedAt   time.Time
	ActivatedAt *time.Time // when this version last became the active policy; nil if never
}

// Accounts stores the pool's accounts.
type Accounts interface {
	// ListAccounts returns every account, enabled or not, ordered by name.
	ListAccounts(ctx context.Context) ([]Account, error)
	// GetAccount returns the account with the given ID or name, or ErrNotFound.
	GetAccount(ctx context.Context, idOrName string) (Account, error)
	// PutAccount inserts or updates (matched by Name) an account and returns it
	// with ID and timestamps set.
	PutAccount(ctx context.Context, a Account) (Account, error)
	// DeleteAccount removes the account with the given ID or name, or
	// returns ErrNotFound. It leaves a tombstone in the change feed, with
	// the time of the deletion, until PruneAccountTombstones removes it.
	DeleteAccount(ctx context.Context, idOrName string) error
	// AccountChanges reads the account change feed: the accounts changed
	// and the IDs deleted after version since (a previous answer's
	// Version; 0 reads every account, in one consistent snapshot), and
	// the version that brings the reader to. Every PutAccount and
	// DeleteAccount takes the next version, in commit order, so reading
	// from the last Version never misses a change and never reads an
	// unchanged row. A since older than a tombstone pruned is answered
	// with every account and Full set (a full resync), never with a
	// deletion missing. Credentials are opened when open is true; with open
	// false they are left sealed in Account.Sealed (nothing is decrypted:
	// an instance that does not own an account never holds its secrets).
	AccountChanges(ctx context.Context, since int64, open bool) (AccountChanges, error)
	// PruneAccountTombstones deletes the change feed's tombstones of the
	// accounts deleted before before, and every older one by version,
	// and returns how many it deleted. A reader whose version is below
	// the newest tombstone pruned then gets a full read (AccountChanges.Full)
	// instead of its deletions. Safe to run at once on every instance (the
	// runs serialize on the feed; a second finds nothing to do). A zero
	// time deletes nothing.
	PruneAccountTombstones(ctx context.Context, before time.Time) (int64, error)
	// OpenCredentials opens credentials left sealed by AccountChanges
	// (Account.Sealed). The error wraps ErrUnseal when no key of the
	// Store's Sealer opens them; it never holds the plaintext.
	OpenCredentials(sealed string) (Credentials, error)
}

// APIKeys stores client API keys.
type APIKeys interface {
	// CreateAPIKey stores k (ID assigned when empty); ErrConflict when the name or hash exists.
	CreateAPIKey(ctx context.Context, k APIKey) (APIKey, error)
	// APIKeyByHash returns the key whose Hash equals hash, or ErrNotFound.
	APIKeyByHash(ctx context.Context, hash string) (APIKey, error)
	// ListAPIKeys returns every key ordered by name.
	ListAPIKeys(ctx context.Context) ([]APIKey, error)
	// DeleteAPIKey removes the key with the given ID or name, or returns ErrNotFound.
	DeleteAPIKey(ctx context.Context, idOrName string) error
	// UpdateAPIKey replaces the mutable fields (Name, Group, Models, Disabled,
	// ExpiresAt, Limits, Admin, Weight) of the key with k.ID and returns the key as stored;
	// Hash, Prefix and CreatedAt never change (k's are ignored).
	// ErrNotFound if absent, ErrConflict if the new name is taken, ErrInvalid
	// if Name is empty, a limit negative, or Admin set on a key with a
	// UserID (CheckKeyOwner).
	UpdateAPIKey(ctx context.Context, k APIKey) (APIKey, error)
}

// Usage stores usage records.
type Usage interface {
	// InsertUsage writes all records in one transaction: either all are stored
	// or none. Records whose RequestID is already stored (or repeated in recs)
	// are skipped, so a retried batch is never counted twice. The hourly
	// rollups of the records actually stored are updated in the same
	// transaction, and so is the billing of each stored record with a
	// UserID and a Cost > 0: a LedgerCharge row of -Cost referencing its
	// RequestID, the user's balance, and the user's daily rollup (a record
	// of a user deleted meanwhile is stored but not charged). ErrInvalid if
	// a record fails Validate (nothing is written).
	InsertUsage(ctx context.Context, recs []UsageRecord) error
	// CountUsage returns the number of stored usage records.
	CountUsage(ctx context.Context) (int64, error)
	// Rollups returns the hourly rollup rows matching q, ordered by hour, key,
	// account, model (bytewise), status; nil when none match. InsertUsage
	// maintains them in its transaction, so they always agree exactly with
	// the records (until PruneUsage removes records older than the rollups).
	Rollups(ctx context.Context, q UsageQuery) ([]UsageRollup, error)
	// PruneUsage deletes usage records (and error events) whose At is before recordsBefore and
	// rollup rows whose Hour is before rollupsBefore, in small batches (no
	// long locks), and returns how many of each it deleted. Rollups are not
	// changed by pruning records: they outlive them. A zero time deletes nothing.
	PruneUsage(ctx context.Context, recordsBefore, rollupsBefore time.Time) (records, rollups int64, err error)
}

// Settings stores operator settings as string values by key (table
// settings). Well-known keys are the Setting* constants.
type Settings interface {
	// GetSetting returns the value of key, or ErrNotFound.
	GetSetting(ctx context.Context, key string) (string, error)
	// PutSetting sets key to value (inserting or replacing); ErrInvalid if key is empty.
	PutSetting(ctx context.Context, key, value string) error
	// ListSettings returns every setting (an empty, non-nil map when there are none).
	ListSettings(ctx context.Context) (map[string]string, error)
}

// Well-known settings keys. Values are decimal integers.
const (
	// SettingUsageRecordsDays is how many days usage records are kept
	// (DefaultUsageRecordsDays when unset).
	SettingUsageRecordsDays = "retention.usage_records_days"
	// SettingUsageHourlyDays is how many days hourly rollups are kept
	// (DefaultUsageHourlyDays when unset).
	SettingUsageHourlyDays = "retention.usage_hourly_days"
	// SettingUsageDailyDays is how many days the daily rollups per user and
	// model (usage_daily_users: the spend pages) are kept
	// (DefaultUsageDailyDays when unset).
	SettingUsageDailyDays = "retention.usage_daily_days"
	// SettingAccountTombstonesDays is how many days the account change
	// feed keeps a deleted account's tombstone
	// (DefaultAccountTombstonesDays when unset): an instance whose feed
	// reads fail for longer resyncs every account when it reads again.
	SettingAccountTombstonesDays = "retention.account_tombstones_days"
)

// Retention defaults, in days.
const (
	// DefaultUsageRecordsDays is how many days usage records are kept when
	// SettingUsageRecordsDays is unset.
	DefaultUsageRecordsDays = 30
	// DefaultUsageHourlyDays is how many days hourly rollups are kept when
	// SettingUsageHourlyDays is unset.
	DefaultUsageHourlyDays = 400
	// DefaultUsageDailyDays is how many days the daily rollups per user and
	// model are kept when SettingUsageDailyDays is unset: five years.
	DefaultUsageDailyDays = 1825
	// DefaultAccountTombstonesDays is how many days the account change
	// feed keeps tombstones when SettingAccountTombstonesDays is unset. A
	// running instance reads the feed every 5 s, so only one cut off from
	// storage for a week resyncs in full.
	DefaultAccountTombstonesDays = 7
)

// Policies stores routing policies with their full history (tables policies
// and policy_versions). Versions are never deleted or changed, except that
// activating one stamps its ActivatedAt; at most one version of one policy
// is active at a time, and rolling back is activating an older version.
type Policies interface {
	// SavePolicy stores source as the next version of name (1 for a new
	// name) and returns it; it does not change which version is active.
	// ErrInvalid if name is empty.
	SavePolicy(ctx context.Context, name, source string) (PolicyVersion, error)
	// GetPolicy returns version v of name (v <= 0: the latest), or ErrNotFound.
	GetPolicy(ctx context.Context, name string, v int) (PolicyVersion, error)
	// PolicyHistory returns every version of name, newest first, or ErrNotFound.
	PolicyHistory(ctx context.Context, name string) ([]PolicyVersion, error)
	// ListPolicies returns the latest version of every policy, ordered by
	// name (bytewise); an empty list when there are none.
	ListPolicies(ctx context.Context) ([]PolicyVersion, error)
	// ActivatePolicy makes version v of name the active policy (v <= 0: the
	// latest), replacing whichever version of any policy was active, stamps
	// its ActivatedAt with the current time and returns it; ErrNotFound (and
	// nothing changes) if it does not exist.
	ActivatePolicy(ctx context.Context, name string, v int) (PolicyVersion, error)
	// ActivePolicy returns the active policy version, or ErrNotFound if none was activated.
	ActivePolicy(ctx context.Context) (PolicyVersion, error)
}

// Store is a complete storage backend.
type Store interface {
	Accounts
	APIKeys
	Usage
	Settings
	Policies
	RequestLog
	AdminUsers
	UsageLog
	Users
	// Close releases the backend's resources; the Store must not be used after.
	Close() error
}
