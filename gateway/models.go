package gateway

import (
	"context"
	"github.com/troupe-gw/troupe/actors"
	"slices"
	"strconv"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/valyala/fasthttp"
)

// models answers GET /v1/models with the models the pool serves, in OpenAI's
// list shape (https://platform.openai.com/docs/api-reference/models/list):
// {"object":"list","data":[{"id","object":"model","created","owned_by"}]},
// or for Anthropic clients (anthropicClient: an anthropic-version or
// x-api-key header) in Anthropic's
// (https://docs.claude.com/en/api/models-list):
// {"data":[{"type":"model","id","display_name","created_at"}],"has_more":false,"first_id","last_id"}.
// Every model an account that can serve now or after its cooldown serves
// is listed (not a disabled, banned or unauthorized one's: listed),
// whatever its provider, since every client protocol
// reaches every account. Aliases are listed too; a
// key's model allowlist narrows the list, and for a user's key so do the
// user's allowlist and the models that have a price (docs/billing.md).
func (s *Server) models(ctx *fasthttp.RequestCtx) {
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if _, aerr := s.keyUser(ctx, &key); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	ids, seen := s.servedModels(ctx, &key)
	if anthropicClient(ctx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(appendAnthropicModels(make([]byte, 0, 96+len(ids)*128), ids, s.now()))
		return
	}
	b := append(make([]byte, 0, 64+len(ids)*96), `{"object":"list","data":[`...)
	created := strconv.FormatInt(s.now().Unix(), 10)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendOpenAIModel(b, id, seen[id], created)
	}
	b = append(b, "]}\n"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// servedModels returns the sorted ids /v1/models lists for key and each
// listed id's owner (the provider of the first account serving it). A
// user's key lists only what its user may use and has a price; none when
// the user cannot be read or billing is off.
func (s *Server) servedModels(ctx context.Context, key *storage.APIKey) ([]string, map[string]string) {
	var user *storage.User
	if key.UserID != "" {
		if s.billing == nil {
			return nil, nil
		}
		u, err := s.billing.User(s.detach(ctx), key.UserID)
		if err != nil {
			s.log.Warn("models: user not read; listing none", "err", err)
			return nil, nil
		}
		user = &u
	}
	seen := map[string]string{}           // model → owner (provider)
	anyCodex := false                     // a codex account serves any model: the catalog says which
	s.sys.EachView(func(v *actors.View) { // in place: Views copies every account's
		if !listed(v.Status) {
			return
		}
		for _, m := range v.Models {
			if _, ok := seen[m]; !ok {
				seen[m] = string(v.Provider)
			}
		}
		anyCodex = anyCodex || (v.Provider == storage.ProviderCodex && len(v.Models) == 0)
	})
	// Under fleet ownership the views are this instance's share; the
	// deployment serves every account's models (docs/fleet.md).
	sctx, cancel := context.WithTimeout(context.Background(), time.Second) // not the request's: a fasthttp context is no context.Context off a server
	defer cancel()
	if served, err := s.sys.Served(sctx); err == nil {
		for _, a := range served {
			if !listed(a.Status) { // as its owner published it
				continue
			}
			for _, m := range a.Models {
				if _, ok := seen[m]; !ok {
					seen[m] = string(a.Provider)
				}
			}
			anyCodex = anyCodex || (a.Provider == storage.ProviderCodex && len(a.Models) == 0)
		}
	}
	if anyCodex && s.catalog != nil {
		for _, m := range s.catalog.Models() {
			if _, ok := seen[m]; !ok {
				seen[m] = string(storage.ProviderCodex)
			}
		}
	}
	for alias, target := range s.cfg.Aliases {
		if owner, ok := seen[target]; ok {
			seen[alias] = owner
		}
	}
	ids := make([]string, 0, len(seen))
	for m := range seen {
		if modelAllowed(key, m) && (user == nil || s.billing.Usable(user, m)) {
			ids = append(ids, m)
		}
	}
	slices.Sort(ids)
	return ids, seen
}

// appendOpenAIModel appends one OpenAI model object:
// {"id","object":"model","created","owned_by"}; created is unix seconds.
func appendOpenAIModel(b []byte, id, owner, created string) []byte {
	b = append(b, `{"id":`...)
	b = translate.AppendString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = append(b, created...)
	b = append(b, `,"owned_by":`...)
	b = translate.AppendString(b, owner)
	return append(b, '}')
}

// appendAnthropicModel appends one Anthropic model object:
// {"type":"model","id","display_name","created_at"}; created is RFC 3339.
func appendAnthropicModel(b []byte, id, created string) []byte {
	b = append(b, `{"type":"model","id":`...)
	b = translate.AppendString(b, id)
	b = append(b, `,"display_name":`...)
	b = translate.AppendString(b, id)
	b = append(b, `,"created_at":"`...)
	b = append(b, created...)
	return append(b, `"}`...)
}

// modelPath returns the model id of a GET /v1/models/{id} (or /models/{id})
// path, and false for any other path or an empty id. The id may contain
// slashes (openai_compat ids such as "qwen/qwen3-32b").
func modelPath(path []byte) (string, bool) {
	for _, prefix := range [...]string{"/v1/models/", "/models/"} {
		if len(path) > len(prefix) && string(path[:len(prefix)]) == prefix {
			return string(path[len(prefix):]), true
		}
	}
	return "", false
}

// model answers GET /v1/models/{id}: the one model object of id as
// /v1/models lists it, in OpenAI's shape
// (https://platform.openai.com/docs/api-reference/models/retrieve) or, for
// Anthropic clients, Anthropic's (https://docs.claude.com/en/api/models).
// An id the list does not show for this key is 404 model_not_found in the
// client's error shape (Anthropic: not_found_error).
func (s *Server) model(ctx *fasthttp.RequestCtx, id string) {
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if _, aerr := s.keyUser(ctx, &key); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	ids, seen := s.servedModels(ctx, &key)
	if _, found := slices.BinarySearch(ids, id); !found {
		writeError(ctx, errModelNotFound(id))
		return
	}
	ctx.SetContentType("application/json")
	if anthropicClient(ctx) {
		ctx.SetBody(append(appendAnthropicModel(nil, id, s.now().UTC().Format(time.RFC3339)), '\n'))
		return
	}
	ctx.SetBody(append(appendOpenAIModel(nil, id, seen[id], strconv.FormatInt(s.now().Unix(), 10)), '\n'))
}

// appendAnthropicModels appends Anthropic's model list for ids (sorted), all
// on one page. created_at is RFC 3339; Troupe does not know when a model was
// released, so it is the time of the answer, as OpenAI's "created" is.
func appendAnthropicModels(b []byte, ids []string, now time.Time) []byte {
	created := now.UTC().Format(time.RFC3339)
	b = append(b, `{"data":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAnthropicModel(b, id, created)
	}
	b = append(b, `],"has_more":false,"first_id":`...)
	if len(ids) == 0 {
		b = append(b, `null,"last_id":null`...)
	} else {
		b = translate.AppendString(b, ids[0])
		b = append(b, `,"last_id":`...)
		b = translate.AppendString(b, ids[len(ids)-1])
	}
	return append(b, "}\n"...)
}

// listed reports whether an account in status st has its models listed:
// only when it can serve now (active) or once its cooldown ends (cooling,
// a wait the gateway bounds). A disabled, banned or unauthorized account
// (the upstream refused its credentials and a refresh did not help) serves
// nothing until the operator acts, so listing its models would promise
// what every request would be refused.
func listed(st actors.Status) bool {
	return st == actors.StatusActive || st == actors.StatusCooling
}
