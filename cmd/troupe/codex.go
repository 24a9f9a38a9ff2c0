package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// CodexConfig is the codex: block of the configuration: how ChatGPT/Codex
// OAuth accounts refresh their tokens and present themselves upstream
// (docs/codex.md).
type CodexConfig struct {
	// OAuthTokenURL and OAuthClientID are the OAuth endpoint and client
	// refresh grants go to; the Codex CLI's by default.
	OAuthTokenURL string `koanf:"oauth_token_url"`
	OAuthClientID string `koanf:"oauth_client_id"`
	// RefreshLead is how long before the access token's exp it is refreshed.
	RefreshLead time.Duration `koanf:"refresh_lead"`
	// TLSProfile is the ClientHello of codex connections: chrome (default),
	// firefox, safari, edge, ios, randomized, or go (Go's own TLS).
	TLSProfile string `koanf:"tls_profile"`
	// Proxies is the pool of upstream proxies (http://, https://,
	// socks5://) for codex accounts without their own; each account always
	// gets the same one. Empty: direct connections.
	Proxies []string `koanf:"proxies"`
	// IdentitySecret keys the per-account identities (installation, session
	// ids, prompt_cache_key); default: derived from the master key.
	IdentitySecret string `koanf:"identity_secret"`
	// ModelsRefresh is how often the models list of each plan is fetched
	// from the backend; 0 turns the catalog off.
	ModelsRefresh time.Duration `koanf:"models_refresh"`
}

func codexDefaults(m map[string]any) {
	m["codex.oauth_token_url"] = upstream.DefaultOAuthTokenURL
	m["codex.oauth_client_id"] = upstream.DefaultOAuthClientID
	m["codex.refresh_lead"] = "5m"
	m["codex.tls_profile"] = upstream.DefaultTLSProfile
	m["codex.identity_secret"] = ""
	m["codex.models_refresh"] = "1h"
}

func (c *CodexConfig) validate() error {
	var errs []error
	if !slices.Contains(upstream.TLSProfiles(), c.TLSProfile) {
		errs = append(errs, fmt.Errorf("codex.tls_profile %q: want one of %v", c.TLSProfile, upstream.TLSProfiles()))
	}
	for i, p := range c.Proxies {
		if _, err := upstream.ParseProxy(p); err != nil {
			errs = append(errs, fmt.Errorf("codex.proxies[%d]: %w", i, err)) // the error never quotes the URL
		}
	}
	if c.RefreshLead < 0 || c.ModelsRefresh < 0 {
		errs = append(errs, errors.New("codex.refresh_lead and codex.models_refresh must not be negative"))
	}
	return errors.Join(errs...)
}

// poolProxy returns the pool proxy of account id: the same one for the
// same account on every instance; "" without a pool.
func (c *CodexConfig) poolProxy(id string) string {
	if len(c.Proxies) == 0 {
		return ""
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return c.Proxies[h.Sum32()%uint32(len(c.Proxies))]
}

// codexSetup is what the wiring builds from the codex: block.
type codexSetup struct {
	identity *upstream.Identity
	clients  *upstream.Clients
	oauth    *upstream.OAuth
	catalog  *upstream.CodexCatalog
	base     upstream.Options // transport options of every account
}

func newCodexSetup(cfg *Config) (*codexSetup, error) {
	secret := []byte(cfg.Codex.IdentitySecret)
	if len(secret) == 0 {
		key, _, err := masterKeys(cfg)
		if err != nil {
			return nil, err
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte("troupe codex identity v1"))
		secret = m.Sum(nil)
	}
	return &codexSetup{
		identity: upstream.NewIdentity(secret),
		clients:  upstream.NewClients(upstream.ClientsConfig{}),
		oauth:    upstream.NewOAuth(upstream.OAuthConfig{TokenURL: cfg.Codex.OAuthTokenURL, ClientID: cfg.Codex.OAuthClientID}),
		catalog:  &upstream.CodexCatalog{},
		base:     upstream.Options{HeaderTimeout: cfg.Gateway.HeaderTimeout},
	}, nil
}

// options returns the transport options of account acc.
func (s *codexSetup) options(cfg *Config, base upstream.Options, acc storage.Account) upstream.Options {
	if acc.Provider != storage.ProviderCodex {
		return base
	}
	base.Identity, base.Clients, base.TLSProfile = s.identity, s.clients, cfg.Codex.TLSProfile
	base.Proxy = cfg.Codex.poolProxy(acc.ID)
	return base
}

// refreshConfig turns on token refresh, with leases in the app's cache.
func (s *codexSetup) refreshConfig(a *app) *actors.RefreshConfig {
	return &actors.RefreshConfig{OAuth: s.oauth, Store: a.store, Leases: appLeases{a}, Lead: a.cfg.Codex.RefreshLead}
}

// appLeases reaches the app's cache, which is opened after the actors start
// (and before any account joins the pool, so before any refresh).
type appLeases struct{ a *app }

func (l appLeases) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if l.a.cache == nil {
		return false, storage.ErrCacheUnavailable
	}
	return l.a.cache.AcquireLease(ctx, key, owner, ttl)
}

func (l appLeases) ReleaseLease(ctx context.Context, key, owner string) error {
	if l.a.cache == nil {
		return storage.ErrCacheUnavailable
	}
	return l.a.cache.ReleaseLease(ctx, key, owner)
}

// catalogFirstDelay is how long after start the models catalog is first
// fetched (accounts imported without an access token refresh first).
const catalogFirstDelay = 5 * time.Second

// catalogWanted reports whether refreshCatalogOnce may find a codex
// account to ask: false only when this instance's pool holds every account
// (no fleet ownership) and none of them is a codex account. The refresh
// reads the list of every account, credentials opened, to find the codex
// ones (about 2.7 KB allocated an account, 27 MB at 10,000), and a pool
// without any retries it every minute; skipping it keeps an idle gateway
// of 10,000 OpenAI accounts from allocating 0.45 MB a second and from
// holding that list live when a collection marks it (issue 21). With
// ownership the local pool holds only the accounts this instance owns, so
// the list is read as before.
func (a *app) catalogWanted() bool {
	if a.sys == nil || a.cfg.ownership() {
		return true
	}
	codex := false
	a.sys.EachView(func(v *actors.View) { codex = codex || v.Provider == storage.ProviderCodex })
	return codex
}

// refreshCatalog fetches the codex models list of every plan every
// codex.models_refresh until ctx ends (not at all when it is 0).
func (a *app) refreshCatalog(ctx context.Context) {
	every := a.cfg.Codex.ModelsRefresh
	if every <= 0 || a.codex == nil {
		return
	}
	t := time.NewTimer(catalogFirstDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.refreshCatalogOnce(ctx)
		next := every
		if len(a.codex.catalog.Models()) == 0 {
			next = min(every, time.Minute) // nothing yet: try again soon
		}
		t.Reset(next)
	}
}

func (a *app) refreshCatalogOnce(ctx context.Context) {
	if !a.catalogWanted() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	accs, err := a.store.ListAccounts(rctx)
	if err != nil {
		a.log.Warn("codex models catalog: list accounts", "err", err)
		return
	}
	cx := a.codex
	err = cx.catalog.Refresh(rctx, accs, func(acc storage.Account) upstream.Options { return cx.options(a.cfg, cx.base, acc) })
	if err != nil {
		a.log.Warn("codex models catalog", "err", err)
	}
}
