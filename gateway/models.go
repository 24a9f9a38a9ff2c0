package gateway

import (
	"slices"
	"strconv"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/valyala/fasthttp"
)

// models answers GET /v1/models with the models the pool serves, in OpenAI's
// list shape (https://platform.openai.com/docs/api-reference/models/list):
// {"object":"list","data":[{"id","object":"model","created","owned_by"}]}.
// Aliases are listed too; a key's model allowlist narrows the list.
func (s *Server) models(ctx *fasthttp.RequestCtx) {
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	seen := map[string]string{} // model → owner (provider)
	anyCodex := false           // a codex account serves any model: the catalog says which
	for _, v := range s.sys.Views() {
		for _, m := range v.Models {
			if _, ok := seen[m]; !ok {
				seen[m] = string(v.Provider)
			}
		}
		anyCodex = anyCodex || (v.Provider == storage.ProviderCodex && len(v.Models) == 0)
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
		if modelAllowed(&key, m) {
			ids = append(ids, m)
		}
	}
	slices.Sort(ids)
	b := append(make([]byte, 0, 64+len(ids)*96), `{"object":"list","data":[`...)
	created := strconv.FormatInt(s.now().Unix(), 10)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = translate.AppendString(b, id)
		b = append(b, `,"object":"model","created":`...)
		b = append(b, created...)
		b = append(b, `,"owned_by":`...)
		b = translate.AppendString(b, seen[id])
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
