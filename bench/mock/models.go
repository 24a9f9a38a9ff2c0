package mock

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// modelsCreated is the "created" time of every listed model (unix seconds).
const modelsCreated = 1735689600

// modelsETag is the ETag of the codex model list (and x-models-etag on
// codex answers); the list never changes while an account exists.
const modelsETag = `"troupe-mock-models-1"`

// serveModels answers GET /v1/models and /backend-api/codex/models with the
// account's models in the OpenAI list shape (an anthropic account's, asked
// with x-api-key, in Anthropic's: see serveAnthropicModels):
//
//	{"object":"list","data":[{"id","object":"model","created","owned_by"}…]}
//
// The codex listing also carries "models":[{"slug","display_name",…}], the
// shape the Codex backend uses, so either reader finds the ids.
func (f *Fleet) serveModels(ctx *fasthttp.RequestCtx, acc *account, rt route) {
	if rt == routeAnthropicModels {
		f.serveAnthropicModels(ctx, acc)
		return
	}
	owner := "openai"
	if acc.cfg.Kind == KindOpenAICompat {
		owner = "troupe-mock"
	}
	models := acc.listedModels()
	b := make([]byte, 0, 64+96*len(models))
	b = append(b, `{"object":"list","data":[`...)
	for i, m := range models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, m)
		b = append(b, `,"object":"model","created":`...)
		b = strconv.AppendInt(b, modelsCreated, 10)
		b = append(b, `,"owned_by":`...)
		b = appendJSONString(b, owner)
		b = append(b, '}')
	}
	b = append(b, ']')
	if rt == routeCodexModels {
		b = append(b, `,"models":[`...)
		for i, m := range models {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"slug":`...)
			b = appendJSONString(b, m)
			b = append(b, `,"display_name":`...)
			b = appendJSONString(b, m)
			b = append(b, `,"visibility":"list","supported_in_api":true,"priority":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
		ctx.Response.Header.Set("ETag", modelsETag)
	}
	b = append(b, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
