package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// credentialsInput are credentials as the admin API takes them: a field
// that is absent or null keeps the stored value, "" clears it, any other
// string replaces it. They are never sent back.
type credentialsInput struct {
	APIKey       *string `json:"api_key,omitempty"`
	AccessToken  *string `json:"access_token,omitempty"`
	RefreshToken *string `json:"refresh_token,omitempty"`
	IDToken      *string `json:"id_token,omitempty"`
	AccountID    *string `json:"account_id,omitempty"`
}

// accountInput is an account as the admin API takes it (create, edit,
// import) and as export writes it (without credentials). Absent fields keep
// the stored value on edit and import; on create they take the zero value.
type accountInput struct {
	Name           string            `json:"name"`
	Provider       *string           `json:"provider,omitempty"`
	BaseURL        *string           `json:"base_url,omitempty"`
	Models         *[]string         `json:"models,omitempty"`
	MaxConcurrency *int              `json:"max_concurrency,omitempty"`
	Group          *string           `json:"group,omitempty"`
	Tags           *[]string         `json:"tags,omitempty"`
	Priority       *int              `json:"priority,omitempty"`
	Disabled       *bool             `json:"disabled,omitempty"`
	Credentials    *credentialsInput `json:"credentials,omitempty"`
	// APIKey is shorthand for credentials.api_key, as in the config file.
	APIKey *string `json:"api_key,omitempty"`
	// Version is the account's version as read (GET, export): on edit and
	// import a stored account no longer at it is not overwritten (409
	// edit_conflict, 409 import_stale). Ignored on create.
	Version *int64 `json:"version,omitempty"`
}

func decodeAccountInput(b []byte) (accountInput, *APIError) {
	var in accountInput
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return in, errBadParam("body", "The body must be a JSON account object: "+jsonDecodeError(err))
	}
	if in.Name == "" {
		return in, errBadParam("name", "An account needs a name.")
	}
	return in, nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// account applies in to base (the stored account, or a zero one) and checks
// the result. Errors are client-facing and name the field.
func (in *accountInput) account(base storage.Account) (storage.Account, *APIError) {
	a := base
	a.Name = in.Name
	if in.Provider != nil {
		a.Provider = storage.Provider(*in.Provider)
	}
	set(&a.BaseURL, in.BaseURL)
	set(&a.Models, in.Models)
	set(&a.MaxConcurrency, in.MaxConcurrency)
	set(&a.Group, in.Group)
	set(&a.Tags, in.Tags)
	set(&a.Priority, in.Priority)
	set(&a.Disabled, in.Disabled)
	if c := in.Credentials; c != nil {
		set(&a.Credentials.APIKey, c.APIKey)
		set(&a.Credentials.AccessToken, c.AccessToken)
		set(&a.Credentials.RefreshToken, c.RefreshToken)
		set(&a.Credentials.IDToken, c.IDToken)
		set(&a.Credentials.AccountID, c.AccountID)
	}
	set(&a.Credentials.APIKey, in.APIKey)
	if !a.Provider.Valid() {
		return a, errBadParam("provider", "provider is one of codex, openai, openai_compat, anthropic.")
	}
	if storage.URLHasCredentials(a.BaseURL) {
		return a, errBadParam("base_url", storage.ErrURLCredentials.Error()+".")
	}
	if a.BaseURL != "" && !upstream.ValidBaseURL(a.BaseURL) {
		return a, errBadParam("base_url", "base_url must be an absolute http or https URL, such as https://api.example.com/v1.")
	}
	if a.BaseURL == "" && a.Provider == storage.ProviderOpenAICompat {
		return a, errBadParam("base_url", "An openai_compat account needs a base_url.")
	}
	if a.MaxConcurrency < 0 || a.MaxConcurrency > 10_000 {
		return a, errBadParam("max_concurrency", "max_concurrency is 0 (meaning 1) to 10000.")
	}
	if len(a.Name) > 200 {
		return a, errBadParam("name", "An account name has at most 200 bytes.")
	}
	if len(a.Group) > maxGroupBytes {
		return a, errGroup()
	}
	if !storage.TextOK(a.Name, a.BaseURL, a.Group) || !storage.TextOK(a.Models...) || !storage.TextOK(a.Tags...) {
		return a, errBadParam("name", "Names, base_url, group, models and tags must be UTF-8 text without NUL bytes.")
	}
	if aerr := errEmptyEntry("models", a.Models); aerr != nil {
		return a, aerr
	}
	if aerr := errEmptyEntry("tags", a.Tags); aerr != nil {
		return a, aerr
	}
	return a, nil
}

// exportOf is the export form of a: every field but the credentials, and
// its version, so that an import of the export does not overwrite what
// changed since (importAccounts).
func exportOf(a storage.Account) accountInput {
	p := string(a.Provider)
	models, tags := nonNil(a.Models), nonNil(a.Tags)
	base := storage.RedactURL(a.BaseURL) // a row stored before such URLs were refused
	v := a.Version
	return accountInput{Name: a.Name, Provider: &p, BaseURL: &base, Models: &models, MaxConcurrency: &a.MaxConcurrency,
		Group: &a.Group, Tags: &tags, Priority: &a.Priority, Disabled: &a.Disabled, Version: &v}
}

// importError names one refused entry of an import.
type importError struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	Message string `json:"message"`
}

// parseImport decodes an import body: a JSON array of account objects (the
// export format), or an object {"accounts": [...]}. Formats of other tools
// are added here.
func parseImport(body []byte) ([]accountInput, error) {
	body = bytes.TrimSpace(body)
	var list []accountInput
	switch {
	case len(body) > 0 && body[0] == '[':
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, err
		}
	case len(body) > 0 && body[0] == '{':
		var wrapped struct {
			Accounts []accountInput `json:"accounts"`
		}
		if err := json.Unmarshal(body, &wrapped); err != nil {
			return nil, err
		}
		list = wrapped.Accounts
	default:
		return nil, errors.New("expected a JSON array of accounts")
	}
	return list, nil
}

// importAccounts serves POST /api/admin/accounts/import: every entry is
// checked first, and nothing is written unless all pass; then each is
// upserted by name (absent fields and credentials keep the stored values,
// so an export imports back without losing credentials).
// ?dry_run=1 checks only.
//
// An entry with a "version" (an export writes each account's) whose
// stored account is no longer at it — changed since the export: edited,
// tokens refreshed, disabled by the hygiene rule — would write back the
// exported state over the newer one: the import is refused with 409
// import_stale listing every such entry, and nothing is written, unless
// ?overwrite=1. Each update is written conditionally on the version this
// import read (storage.Account.IfVersion), so a change made while the
// import runs is not overwritten either.
func (s *Server) importAccounts(ctx *fasthttp.RequestCtx, rctx context.Context) {
	list, err := parseImport(ctx.PostBody())
	if err != nil {
		writeError(ctx, errBadParam("body", "The body must be a JSON array of accounts (the export format): "+jsonDecodeError(err)))
		return
	}
	if len(list) == 0 {
		writeError(ctx, errBadParam("body", "The import holds no accounts."))
		return
	}
	existing, err := s.store.ListAccounts(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	byName := make(map[string]storage.Account, len(existing))
	for _, a := range existing {
		byName[a.Name] = a
	}
	overwrite := ctx.QueryArgs().GetBool("overwrite")
	var (
		errs    []importError
		stale   []importError
		planned = make([]storage.Account, 0, len(list))
		seen    = make(map[string]int, len(list))
		created int
	)
	for i := range list {
		in := &list[i]
		if in.Name == "" {
			errs = append(errs, importError{Index: i, Message: "an account needs a name"})
			continue
		}
		if j, dup := seen[in.Name]; dup {
			errs = append(errs, importError{Index: i, Name: clip(in.Name), Message: fmt.Sprintf("the name repeats entry %d", j)})
			continue
		}
		seen[in.Name] = i
		base, ok := byName[in.Name]
		if !ok {
			created++
			base.MaxConcurrency = storage.DefaultMaxConcurrency // a new account without one, as createAccount
		}
		if ok && in.Version != nil && *in.Version != base.Version && !overwrite {
			stale = append(stale, importError{Index: i, Name: clip(in.Name), Message: "changed since the export (version " +
				strconv.FormatInt(*in.Version, 10) + " in the file, " + strconv.FormatInt(base.Version, 10) + " stored)"})
		}
		a, aerr := in.account(base)
		if aerr != nil {
			errs = append(errs, importError{Index: i, Name: clip(in.Name), Message: aerr.Message})
			continue
		}
		if ok && !overwrite {
			a.IfVersion = base.Version
		}
		planned = append(planned, a)
	}
	if len(errs) > 0 {
		writeJSON(ctx, 400, map[string]any{"error": map[string]any{"message": strconv.Itoa(len(errs)) + " of " + strconv.Itoa(len(list)) +
			" accounts were refused; nothing was imported.", "type": "invalid_request_error", "code": "import_invalid", "param": nil}, "errors": errs})
		return
	}
	if len(stale) > 0 {
		writeJSON(ctx, 409, map[string]any{"error": map[string]any{"message": strconv.Itoa(len(stale)) + " of " + strconv.Itoa(len(list)) +
			" accounts changed since the file was exported; nothing was imported, so their newer state is kept. Export again and apply your changes to the new file, " +
			"or import with ?overwrite=1 to write the file's state over them.", "type": "invalid_request_error", "code": "import_stale", "param": nil}, "errors": stale})
		return
	}
	if ctx.QueryArgs().GetBool("dry_run") {
		writeJSON(ctx, 200, map[string]any{"dry_run": true, "created": created, "updated": len(planned) - created})
		return
	}
	defer s.accountsChanged()
	for i, a := range planned {
		stored, err := s.store.PutAccount(rctx, a)
		if err != nil {
			s.log.Error("admin: import", "stored", i, "of", len(planned), "err", err)
			if errors.Is(err, storage.ErrStale) {
				writeJSON(ctx, 409, map[string]any{"error": map[string]any{"message": "Account " + clip(a.Name) + " changed while it was being imported and was not overwritten" +
					"; the " + strconv.Itoa(i) + " accounts before it were imported, the rest were not. Export again, or import with ?overwrite=1.",
					"type": "invalid_request_error", "code": "import_stale", "param": nil}, "imported": i})
				return
			}
			if errors.Is(err, storage.ErrInvalid) || errors.Is(err, storage.ErrConflict) {
				writeJSON(ctx, 400, map[string]any{"error": map[string]any{"message": "Account " + clip(a.Name) + " was refused: " + clip(storageReason(err)) +
					"; the " + strconv.Itoa(i) + " accounts before it were imported.", "type": "invalid_request_error", "code": "import_invalid", "param": nil}, "imported": i})
				return
			}
			writeJSON(ctx, 500, map[string]any{"error": map[string]any{"message": "Storage error after " + strconv.Itoa(i) + " accounts; see the gateway log.",
				"type": "server_error", "code": nil, "param": nil}, "imported": i})
			return
		}
		s.sys.PutAccount(stored)
	}
	s.log.Info("admin: accounts imported", "created", created, "updated", len(planned)-created)
	writeJSON(ctx, 200, map[string]any{"created": created, "updated": len(planned) - created})
}
