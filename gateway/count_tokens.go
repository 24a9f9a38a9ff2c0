package gateway

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// countWait bounds the wait for a free anthropic account to count tokens;
// past it the gateway answers with its estimate rather than keep the client.
const countWait = time.Second

// countTokens serves POST /v1/messages/count_tokens
// (https://docs.claude.com/en/api/messages-count-tokens): a Messages request
// body without max_tokens, answered with {"input_tokens":N}. When an
// anthropic account serves the model, that upstream counts (its answer,
// errors included, passes through). Otherwise — no such account, none free
// within a second, or it failed — the gateway answers with its estimate
// (estimateInputTokens) and the header X-Troupe-Token-Count: estimate. It
// needs a valid key and an allowed model but does not count against rate or
// token limits: nothing is generated.
func (s *Server) countTokens(ctx *fasthttp.RequestCtx) {
	// Every answer names its request, as /v1/messages does: errors carry
	// it as request_id too.
	setRequestID(ctx, newRequestID(), true)
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	body, aerr := s.requestBody(ctx) // Content-Encoding is not passed upstream: the body goes decompressed
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if !translate.ValidWithin(body, maxJSONDepth) || !gjson.ParseBytes(body).IsObject() {
		writeError(ctx, errBadJSON())
		return
	}
	m := gjson.GetBytes(body, "model")
	switch {
	case !m.Exists() || m.Type == gjson.Null || (m.Type == gjson.String && m.Str == ""):
		writeError(ctx, errMissingModel())
		return
	case m.Type != gjson.String:
		writeError(ctx, errBadParam("model", "Invalid type for 'model': expected a string."))
		return
	}
	var msgs gjson.Result
	n := 0
	var estimated [len(estimatedKeys)]int
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		if k.Str == "messages" {
			msgs = v
			n++
		} else if i := slices.Index(estimatedKeys[:], k.Str); i >= 0 {
			estimated[i]++
		}
		return true
	})
	if n > 1 { // as parseBody: the count reads the first, an upstream the last
		writeError(ctx, errBadParam("messages", "Duplicate key 'messages' in the request body."))
		return
	}
	for i, c := range estimated {
		if c > 1 {
			writeError(ctx, errBadParam(estimatedKeys[i], "Duplicate key '"+estimatedKeys[i]+"' in the request body."))
			return
		}
	}
	if aerr := checkMessages(translate.Messages, msgs); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if !modelAllowed(&key, m.Str) {
		writeError(ctx, errModelNotAllowed(m.Str))
		return
	}
	// A user's key: the user must be enabled, the model in its allowlist
	// and priced, as on /v1/messages (billing.Gate.Admit's order and
	// answers): a count may reach an upstream account, and a count of a
	// request the gateway would refuse tells the client nothing true.
	if u, aerr := s.keyUser(ctx, &key); aerr != nil {
		writeError(ctx, aerr)
		return
	} else if u != nil && len(u.Models) > 0 && !slices.Contains(u.Models, m.Str) {
		writeError(ctx, &APIError{Status: 403, Type: "permission_error", Code: "model_not_allowed", Param: "model",
			Message: "Your account is not allowed to use the model `" + clip(m.Str) + "`."})
		return
	} else if u != nil && !s.priced(m.Str) {
		writeError(ctx, errModelNotPriced(m.Str))
		return
	}
	target := m.Str
	if t, ok := s.cfg.Aliases[m.Str]; ok {
		target = t
		if b, err := sjson.SetBytes(body, "model", t); err == nil {
			body = b
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.cfg.NonStreamTimeout)
	defer cancel()
	lease, err := s.sys.Acquire(rctx, actors.AcquireRequest{
		Endpoint: translate.Messages, Native: true, Model: target, Group: key.Group, MaxWait: countWait, KeyID: key.ID, Wait: waitCheck{s},
	})
	if err == nil {
		if s.countUpstream(ctx, rctx, lease, body) {
			return
		}
	} else if errors.Is(err, errNeverServable) || (errors.Is(err, actors.ErrNoAccount) && s.neverServable(target)) {
		writeError(ctx, errModelNotFound(m.Str))
		return
	}
	ctx.Response.Header.Set("X-Troupe-Token-Count", "estimate")
	ctx.SetContentType("application/json")
	b := append(make([]byte, 0, 32), `{"input_tokens":`...)
	b = strconv.AppendInt(b, estimateInputTokens(body), 10)
	ctx.SetBody(append(b, "}\n"...))
}

// countUpstream asks lease's upstream to count; it reports whether it
// answered the client (a count, or the upstream's refusal of the request).
// The lease is released either way.
func (s *Server) countUpstream(ctx *fasthttp.RequestCtx, rctx context.Context, lease *actors.Lease, body []byte) bool {
	start := s.now()
	tc, ok := lease.Transport.(upstream.TokenCounter)
	if !ok {
		s.release(nil, lease, 0, upstream.Verdict{Class: upstream.ClassRequest}, start, 0)
		return false
	}
	resp, err := tc.CountTokens(rctx, &upstream.Request{Endpoint: translate.Messages, Body: body, Header: passHeaders(ctx),
		RawQuery: string(ctx.URI().QueryString())})
	if err != nil {
		s.release(nil, lease, 0, upstream.ClassifyError(err), start, 0)
		return false
	}
	out, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	switch {
	case rerr != nil:
		s.release(nil, lease, resp.Status, upstream.Verdict{Class: upstream.ClassTransient}, start, 0)
		return false
	case resp.Status >= 200 && resp.Status <= 299 && gjson.GetBytes(out, "input_tokens").Type == gjson.Number:
		s.release(nil, lease, resp.Status, upstream.Verdict{}, start, s.now().Sub(start))
		ctx.SetContentType("application/json")
		ctx.SetBody(out)
		return true
	}
	v := upstream.Classify(resp.Status, resp.Header, out)
	if resp.Status >= 200 && resp.Status <= 299 {
		v = upstream.Verdict{Class: upstream.ClassTransient} // 2xx without a count
	}
	s.release(nil, lease, resp.Status, v, start, 0)
	if v.Class == upstream.ClassRequest && gjson.GetBytes(out, "error.message").Exists() {
		resetKeepingRequestID(ctx)
		ctx.SetStatusCode(resp.Status)
		ctx.SetContentType("application/json")
		ctx.SetBody(out)
		return true
	}
	return false
}

// priced reports whether model has a price (a user's key may use only
// those); keyUser has refused a user's key when billing is off.
func (s *Server) priced(model string) bool {
	if s.billing == nil {
		return false
	}
	_, ok := s.billing.Price(model)
	return ok
}

// serves reports whether any account of the pool serves model (or any model).
// It reads the views in place (EachView): Views copies every account's.
func (s *Server) serves(model string) bool {
	served := false
	s.sys.EachView(func(v *actors.View) { served = served || v.Serves(model) })
	return served
}

// couldServe reports whether an account of this instance's views could
// serve model, now or once it is back, which decides 503 (retry later)
// from 404 (no such model) when no account can take a request (mayServe
// says which accounts count). It stops at the first account that could:
// called only when an acquire failed or was parked.
func (s *Server) couldServe(model string) bool {
	var cat lazyCatalog
	return s.sys.AnyView(func(v *actors.View) bool { return s.mayServe(v.Provider, v.Models, v.Status, model, &cat) })
}

// mayServe reports whether an account of provider p with the models list
// models, in status st, could serve model now or once it is back:
//   - an account that names model in its models list, whatever its status
//     (the operator configured the model; a disabled account may be
//     enabled again), unless it is banned;
//   - an account with an empty models list (any model) only while it may
//     take leases by its status, active or cooling: a disabled,
//     unauthorized or banned one would otherwise keep every unknown model
//     alive as a 503;
//   - and, for such a codex account, only a model of the Codex catalog
//     when one is installed and known (SetModelCatalog): the Codex backend
//     serves nothing else, whatever the account's state.
//
// cat reads the catalog once for the calls of one judgement.
func (s *Server) mayServe(p storage.Provider, models []string, st actors.Status, model string, cat *lazyCatalog) bool {
	switch {
	case st == actors.StatusBanned:
		return false
	case len(models) > 0:
		return slices.Contains(models, model)
	case st != actors.StatusActive && st != actors.StatusCooling:
		return false
	case p == storage.ProviderCodex && s.catalog != nil:
		if !cat.read {
			cat.models, cat.read = s.catalog.Models(), true
		}
		_, in := slices.BinarySearch(cat.models, model) // Models is sorted
		return in || len(cat.models) == 0
	}
	return true
}

// lazyCatalog is the Codex catalog's models, read on first need.
type lazyCatalog struct {
	models []string
	read   bool
}

// servedElsewhere reports whether an account this instance does not own
// could serve model (fleet ownership, docs/fleet.md), by mayServe's rule
// and the status its owner last published (active while none is known): a
// request for it is then "no account here right now" (503, retryable
// through a load balancer), never "no such model".
func (s *Server) servedElsewhere(model string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	served, _ := s.sys.Served(ctx)
	var cat lazyCatalog
	for _, a := range served {
		if s.mayServe(a.Provider, a.Models, a.Status, model, &cat) {
			return true
		}
	}
	return false
}

// errNeverServable ends the wait of a parked acquire for a model no account
// could ever serve (waitCheck); the request is answered 404 model_not_found.
var errNeverServable = errors.New("gateway: no account could ever serve the model")

// waitCheck lets a parked acquire wait only for a model some account could
// serve once back (actors.AcquireRequest.Wait): a request for one none
// ever could is answered 404 at once, not after gateway.max_wait.
type waitCheck struct{ s *Server }

// MayWait returns errNeverServable when no account, here or (in a fleet)
// elsewhere, could ever serve model; nil otherwise.
func (w waitCheck) MayWait(model string) error {
	if w.s.neverServable(model) {
		return errNeverServable
	}
	return nil
}

// neverServable reports whether no account, here (couldServe) or in a
// fleet elsewhere (servedElsewhere), could ever serve model: the request
// is then 404 model_not_found, never a 503 to retry.
func (s *Server) neverServable(model string) bool {
	return !s.couldServe(model) && !s.servedElsewhere(model)
}

// Estimate weights: a token per 4 bytes of ASCII text and per non-ASCII
// character (CJK text runs near one token per character), plus fixed costs
// for the framing of each message and tool and for each image or document,
// whose pixels the gateway does not decode (Anthropic bills an image of
// about 1.15 megapixels at ~1,600 tokens:
// https://docs.claude.com/en/docs/build-with-claude/vision).
const (
	tokensPerMessage = 4
	tokensPerTool    = 8
	tokensPerImage   = 1600
	tokensPerDoc     = 3000
)

// estimateInputTokens estimates the input tokens of a Messages request body
// without a tokenizer: the text of system, messages (text, tool inputs and
// results, thinking) and tools (names, descriptions, schemas), weighted as
// documented on the constants above. It is an estimate — Claude's tokenizer
// is not public — meant for budgeting, and for the usage of a stream cut
// before the upstream reported it (gateway/estimate.go).
func estimateInputTokens(body []byte) int64 {
	root := gjson.Parse(b2s(body)) // no copy: body outlives root
	var n int64
	n += textTokens(root.Get("system"))
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		n += tokensPerMessage + textTokens(m.Get("content"))
		return true
	})
	root.Get("tools").ForEach(func(_, t gjson.Result) bool {
		n += tokensPerTool + textTokens(t.Get("name")) + textTokens(t.Get("description")) + rawTokens(t.Get("input_schema").Raw)
		return true
	})
	return max(n, 1)
}

// textTokens estimates the tokens of a content value: a string, or blocks
// whose text-bearing fields are counted and whose images and documents cost
// a fixed amount.
func textTokens(v gjson.Result) int64 {
	switch {
	case v.Type == gjson.String:
		return rawTokens(v.Str)
	case v.IsArray():
		var n int64
		v.ForEach(func(_, b gjson.Result) bool {
			n += blockTokens(b)
			return true
		})
		return n
	case v.IsObject():
		return blockTokens(v)
	}
	return 0
}

func blockTokens(b gjson.Result) int64 {
	switch b.Get("type").Str {
	case "image", "image_url", "input_image": // Messages; Chat and Responses parts (estimateRequestTokens)
		return tokensPerImage
	case "document", "file", "input_file":
		return tokensPerDoc
	case "refusal":
		return rawTokens(b.Get("refusal").Str)
	case "tool_use", "server_tool_use":
		return rawTokens(b.Get("name").Str) + rawTokens(b.Get("input").Raw)
	case "tool_result":
		return textTokens(b.Get("content"))
	case "thinking":
		return rawTokens(b.Get("thinking").Str)
	}
	return rawTokens(b.Get("text").Str)
}

// rawTokens weighs s: a token per 4 ASCII bytes (rounded up) and one per
// other character.
func rawTokens(s string) int64 {
	var ascii, other int64
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		other++
		i += w
	}
	return (ascii+3)/4 + other
}
