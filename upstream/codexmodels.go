package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/storage"
)

// ErrNotModified is FetchCodexModels' answer to a 304: the list is unchanged
// since the ETag given.
var ErrNotModified = errors.New("upstream: models not modified")

// maxModelsBody bounds the models list: 16 MiB (each entry carries prompts).
const maxModelsBody = 16 << 20

// FetchCodexModels gets the models list of account a's plan as the Codex CLI
// does (fixture models.request.http; codex-rs/codex-api/src/endpoint/models.rs):
// GET {base}/models?client_version=CodexClientVersion with the account's
// credentials, Codex's originator and User-Agent, and If-None-Match when etag
// is set. It returns the slugs of the models not hidden (visibility other
// than "hide"), in the backend's order, and the ETag of the answer. A 304 is
// ErrNotModified; other failures are *Error or an error naming the status.
func FetchCodexModels(ctx context.Context, a storage.Account, opts Options, etag string) ([]string, string, error) {
	tr, err := New(a, opts)
	if err != nil {
		return nil, "", err
	}
	t, ok := tr.(*codex)
	if !ok {
		return nil, "", fmt.Errorf("upstream: account %q is not a codex account", a.Name)
	}
	u := *t.url
	u.Path = u.Path[:len(u.Path)-len("responses")] + "models"
	q := u.Query()
	q.Set("client_version", CodexClientVersion)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", &Error{Kind: KindRequest, Err: err}
	}
	h := req.Header
	h["Authorization"] = t.auth
	if t.accountID != nil {
		h["Chatgpt-Account-Id"] = t.accountID
	}
	h["Originator"] = hvOriginator
	h["User-Agent"] = t.userAgent
	h["Accept"] = hvJSON
	if etag != "" {
		h.Set("If-None-Match", etag)
	}
	rt := t.rt
	if rt == nil {
		rt = t.client.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", classifyErr(ctx, &url.Error{Op: "Get", URL: u.Redacted(), Err: err}, false)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, etag, ErrNotModified
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBody))
	if err != nil {
		return nil, "", classifyErr(ctx, err, false)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("upstream: codex models: status %d", resp.StatusCode)
	}
	list := gjson.GetBytes(body, "models")
	if !list.IsArray() {
		return nil, "", errors.New("upstream: codex models: no models array")
	}
	var slugs []string
	for _, m := range list.Array() {
		if s := m.Get("slug").Str; s != "" && m.Get("visibility").Str != "hide" {
			slugs = append(slugs, s)
		}
	}
	return slugs, resp.Header.Get("ETag"), nil
}

// CodexCatalog is the models list of each ChatGPT plan, as the backend last
// gave it. Safe for concurrent use; the zero value is empty and ready.
type CodexCatalog struct {
	mu     sync.RWMutex
	byPlan map[string]catalogPlan
}

type catalogPlan struct {
	models []string
	etag   string
	at     time.Time
}

// Refresh fetches the models list of every plan among accounts: for each
// plan (Credentials.Plan, else the token claims; "" counts as a plan) the
// first enabled codex account with an access token is asked, with the
// plan's last ETag. opts gives each account's transport options. A plan
// whose fetch fails keeps its last list; the errors are joined.
func (c *CodexCatalog) Refresh(ctx context.Context, accounts []storage.Account, opts func(storage.Account) Options) error {
	tried := map[string]bool{}
	var errs []error
	for _, a := range accounts {
		if a.Provider != storage.ProviderCodex || a.Disabled || a.Credentials.AccessToken == "" {
			continue
		}
		cr := a.Credentials
		FillFromClaims(&cr)
		if tried[cr.Plan] {
			continue
		}
		tried[cr.Plan] = true
		c.mu.RLock()
		prev := c.byPlan[cr.Plan]
		c.mu.RUnlock()
		models, etag, err := FetchCodexModels(ctx, a, opts(a), prev.etag)
		switch {
		case errors.Is(err, ErrNotModified):
			prev.at = time.Now()
			models, etag = prev.models, prev.etag
		case err != nil:
			errs = append(errs, fmt.Errorf("plan %q (account %s): %w", cr.Plan, a.Name, err))
			continue
		}
		c.mu.Lock()
		if c.byPlan == nil {
			c.byPlan = map[string]catalogPlan{}
		}
		c.byPlan[cr.Plan] = catalogPlan{models: models, etag: etag, at: time.Now()}
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Plan returns the models of plan (nil when it was never fetched).
func (c *CodexCatalog) Plan(plan string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.byPlan[plan].models)
}

// Models returns the union of every plan's models, sorted.
func (c *CodexCatalog) Models() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, p := range c.byPlan {
		for _, m := range p.models {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out
}
