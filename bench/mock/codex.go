package mock

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// writeCodexHeaders sets the Codex backend's response headers on a 200: the
// x-codex-* rate-limit set (as in testdata/codex-backend/response-headers.200.http,
// values from (*account).codexLimits), the sticky-routing turn state and the
// served model. scratch is reused for formatting and returned grown.
func (s *stream) writeCodexHeaders(h *fasthttp.ResponseHeader, scratch []byte) []byte {
	now := time.Now()
	l := s.acc.codexLimits(now, s.f.started)

	set := func(name string, b []byte) []byte {
		h.SetBytesV(name, b)
		return b[:0]
	}
	b := setCodexLimitHeaders(h, &l, scratch[:0])
	h.Set("X-Reasoning-Included", "true")
	h.Set("X-Models-Etag", modelsETag)
	b = set("Openai-Model", append(b, s.req.model...))
	b = append(b, "ts_"...)
	b = append(b, s.id[:]...)
	return set("X-Codex-Turn-State", b)
}

// setCodexLimitHeaders sets the x-codex-* rate-limit and credit headers of l
// (every codex answer carries them, 429s included). b is scratch space,
// returned grown.
func setCodexLimitHeaders(h *fasthttp.ResponseHeader, l *codexLimits, b []byte) []byte {
	set := func(name string, v []byte) []byte {
		h.SetBytesV(name, v)
		return v[:0]
	}
	h.Set("X-Codex-Active-Limit", "codex")
	h.Set("X-Codex-Plan-Type", "pro")
	b = set("X-Codex-Primary-Used-Percent", appendFloat(b, l.primaryUsed))
	h.Set("X-Codex-Primary-Window-Minutes", strconv.Itoa(int(codexPrimaryWindow/time.Minute)))
	b = set("X-Codex-Primary-Reset-At", strconv.AppendInt(b, l.primaryResetAt, 10))
	b = set("X-Codex-Primary-Reset-After-Seconds", strconv.AppendInt(b, l.primaryResetAfter, 10))
	h.Set("X-Codex-Primary-Over-Secondary-Limit-Percent", "0")
	b = set("X-Codex-Secondary-Used-Percent", appendFloat(b, l.secondaryUsed))
	h.Set("X-Codex-Secondary-Window-Minutes", strconv.Itoa(int(codexSecondaryWindow/time.Minute)))
	b = set("X-Codex-Secondary-Reset-At", strconv.AppendInt(b, l.secondaryResetAt, 10))
	b = set("X-Codex-Secondary-Reset-After-Seconds", strconv.AppendInt(b, l.secondaryResetAfter, 10))
	h.Set("X-Codex-Credits-Has-Credits", "False")
	h.Set("X-Codex-Credits-Unlimited", "False")
	h.Set("X-Codex-Credits-Balance", "0")
	return b
}
