// Package storage is Troupe's persistence contract: accounts, API keys and usage
// records, behind narrow interfaces with one backend per driver.
//
// The embedded backend (package storage/sqlite) needs no set-up; production
// backends (PostgreSQL + Redis) implement the same interfaces. Every method is
// safe for concurrent use and honours ctx cancellation.
package storage

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by lookups whose subject does not exist.
var ErrNotFound = errors.New("storage: not found")

// ErrConflict is returned when a unique field (account name, key hash) is taken.
var ErrConflict = errors.New("storage: conflict")

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
}

// Account is one upstream account in the pool.
type Account struct {
	ID             string      // stable identifier, assigned by the backend on first Put when empty
	Name           string      // unique, operator-facing (e.g. "demo-0042")
	Provider       Provider    // upstream protocol family
	BaseURL        string      // e.g. https://api.openai.com/v1 or https://chatgpt.com/backend-api/codex
	Credentials    Credentials // encrypted at rest
	Models         []string    // models served; empty means any model
	MaxConcurrency int         // in-flight requests allowed at once; <= 0 means 1
	Group          string      // routing group ("" is the default group)
	Tags           []string    // free-form routing tags
	Priority       int         // higher is preferred by policies that honour it
	Disabled       bool        // kept in storage but out of the pool
	CreatedAt      time.Time
	UpdatedAt      time.Time
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
	// DeleteAccount removes the account with the given ID or name, or returns ErrNotFound.
	DeleteAccount(ctx context.Context, idOrName string) error
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
}

// Usage stores usage records.
type Usage interface {
	// InsertUsage writes all records in one transaction: either all are stored
	// or none. Records whose RequestID is already stored are skipped, so a
	// retried batch is never counted twice.
	InsertUsage(ctx context.Context, recs []UsageRecord) error
	// CountUsage returns the number of stored usage records.
	CountUsage(ctx context.Context) (int64, error)
}

// Store is a complete storage backend.
type Store interface {
	Accounts
	APIKeys
	Usage
	// Close releases the backend's resources; the Store must not be used after.
	Close() error
}
