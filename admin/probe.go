package admin

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// probeResult is the answer of POST /api/admin/accounts/{id}/probe.
type probeResult struct {
	OK        bool    `json:"ok"`
	Status    int     `json:"status"`     // upstream HTTP status; 0 when none was received
	Class     string  `json:"class"`      // failure class ("" on success): quota, rate, auth, banned, transient, request
	LatencyMs float64 `json:"latency_ms"` // send to end of the answer
	Model     string  `json:"model"`      // the model asked for
	Message   string  `json:"message,omitempty"`
}

// probeModel is the model a probe asks for: the account's first, else a
// provider default.
func probeModel(a storage.Account) string {
	if len(a.Models) > 0 {
		return a.Models[0]
	}
	switch a.Provider {
	case storage.ProviderCodex:
		return "gpt-5"
	case storage.ProviderAnthropic:
		return "claude-haiku-4-5"
	}
	return "gpt-4.1-mini"
}

// probeAccount sends one minimal request (a one-word prompt, at most 16
// output tokens) to a's upstream outside the pool: it takes no lease and does
// not change the account's state, so an operator can test credentials of a
// disabled or cooling account. It gives up after 30 s.
func probeAccount(ctx context.Context, a storage.Account) probeResult {
	model := probeModel(a)
	res := probeResult{Model: model}
	tr, err := upstream.New(a, upstream.Options{})
	if err != nil {
		res.Class, res.Message = "request", "the account's transport cannot be built: "+clip(err.Error())
		return res
	}
	req := &upstream.Request{}
	switch a.Provider {
	case storage.ProviderCodex:
		req.Endpoint, req.Stream = translate.Responses, true
		req.Body = []byte(`{"model":` + jsonString(model) + `,"input":"ping","stream":true,"store":false}`)
	case storage.ProviderAnthropic:
		req.Endpoint = translate.Messages
		req.Body = []byte(`{"model":` + jsonString(model) + `,"max_tokens":16,"messages":[{"role":"user","content":"ping"}]}`)
	default:
		req.Endpoint = translate.Chat
		req.Body = []byte(`{"model":` + jsonString(model) + `,"max_tokens":16,"messages":[{"role":"user","content":"ping"}]}`)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := tr.Do(pctx, req)
	if err != nil {
		res.LatencyMs = float64(time.Since(start).Microseconds()) / 1000
		res.Class, res.Message = upstream.ClassifyError(err).Class.String(), clip(err.Error())
		return res
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	res.LatencyMs = float64(time.Since(start).Microseconds()) / 1000
	res.Status = resp.Status
	if rerr != nil {
		res.Class, res.Message = upstream.ClassTransient.String(), "the answer broke off: "+clip(rerr.Error())
		return res
	}
	v := upstream.Classify(resp.Status, resp.Header, body)
	if v.Class == upstream.ClassNone && resp.Status >= 400 {
		v.Class = upstream.ClassRequest
	}
	res.Class, res.OK = v.Class.String(), v.Class == upstream.ClassNone
	if !res.OK {
		// The upstream's own message (OpenAI masks keys it quotes), not the whole body.
		if m := gjson.GetBytes(body, "error.message"); m.Exists() {
			res.Message = clip(m.String())
		} else {
			res.Message = "upstream answered " + strconv.Itoa(resp.Status)
		}
	}
	return res
}

// jsonString returns s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
