package mock

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// serveCompact answers POST /v1/responses/compact (openai accounts) and
// POST /backend-api/codex/responses/compact (codex accounts) the way the
// Responses API does
// (https://platform.openai.com/docs/api-reference/responses/compact): one
// JSON compacted response object,
//
//	{"id":"cmp_…","object":"response.compaction","created_at":…,
//	 "output":[{"id":"cmp_…","type":"compaction","encrypted_content":"…"}],
//	 "usage":{"input_tokens",…,"output_tokens",…,"total_tokens"}}
//
// whose output is one opaque compaction item (the real API keeps the
// conversation's user messages beside it; the mock keeps none). A body that
// is not a JSON object, lacks a model or names a model the account does not
// serve is refused in the route's protocol; a status fault (rate limit,
// unauthorized, …) fires as on the route's answers. Compactions are not
// counted in Stats.
func (f *Fleet) serveCompact(ctx *fasthttp.RequestCtx, acc *account, rt route) {
	s := getStream(f, acc, rt)
	defer putStream(s)
	fl := s.readRequest(ctx)
	if fl == nil {
		var answered bool
		if fl, answered = s.statusRefusal(ctx, acc); answered {
			return
		}
	}
	if fl != nil {
		writeFailure(ctx, fl, rt)
		return
	}
	now := time.Now()
	h := &ctx.Response.Header
	b := append(s.buf[:0], "req_"...)
	b = append(b, s.id[:]...)
	h.SetBytesV("X-Request-Id", b)
	if rt == routeCodexCompact {
		l := acc.codexLimits(now, f.started)
		b = setCodexLimitHeaders(h, &l, b[:0])
	} else {
		for _, hd := range openAIRateHeaders {
			h.Set(hd.name, hd.value)
		}
	}
	out := int64(max(s.req.inputTokens/4, 1))
	b = append(b[:0], `{"id":"cmp_`...)
	b = append(b, s.id[:]...)
	b = append(b, `","object":"response.compaction","created_at":`...)
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, `,"output":[{"id":"cmp_`...)
	b = append(b, s.id[:]...)
	b = append(b, `","type":"compaction","encrypted_content":"gAAAAAB`...)
	b = append(b, s.id[:]...)
	b = append(b, `"}],"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(s.req.inputTokens), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(s.req.inputTokens)+out, 10)
	b = append(b, "}}"...)
	s.buf = b
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
