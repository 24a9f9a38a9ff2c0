package gateway

import (
	"bytes"

	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/translate"
)

// The body an upstream gets in the client's own protocol is the client's
// bytes, patched at most once per request and protocol: the model named by
// an alias or by route() instead of the client's, and for an openai Chat
// stream whose client did not ask for it, stream_options.include_usage
// (without usage a stream can be neither billed nor counted against token
// limits). Both edits are made in one copy (patchBody); the result is kept
// on the call for failovers. A translated body gets both from
// translate.TranslateRequest.

// usageOption is what patchBody adds to a Chat body without stream_options.
const usageOption = `"stream_options":{"include_usage":true},`

// patchBody returns body with its model set to c.target when it differs
// from the client's model, and with stream_options.include_usage set when
// usage; body itself when neither applies. It makes one copy, splicing at
// the offsets parseBody found, and falls back to sjson (which copies per
// edit) when those are unknown or the body already has stream_options.
func patchBody(c *call, body []byte, usage bool) ([]byte, error) {
	model := c.target != c.model
	if !model && !usage {
		return body, nil
	}
	if c.modelAt < 0 || (usage && c.streamOptions) {
		return patchBodySlow(c, body, model, usage)
	}
	open := bytes.IndexByte(body, '{')
	if open < 0 || open >= c.modelAt {
		return patchBodySlow(c, body, model, usage)
	}
	end := c.modelAt + c.modelLen
	out := make([]byte, 0, len(body)+len(usageOption)+len(c.target)+8)
	if usage {
		out = append(out, body[:open+1]...)
		out = append(out, usageOption...)
		out = append(out, body[open+1:c.modelAt]...)
	} else {
		out = append(out, body[:c.modelAt]...)
	}
	if model {
		out = translate.AppendString(out, c.target)
	} else {
		out = append(out, body[c.modelAt:end]...)
	}
	return append(out, body[end:]...), nil
}

// patchBodySlow is patchBody through sjson.
func patchBodySlow(c *call, body []byte, model, usage bool) ([]byte, error) {
	var err error
	if model {
		if body, err = sjson.SetBytes(body, "model", c.target); err != nil { // a new slice: c.body is not changed
			return nil, err
		}
	}
	if usage {
		if body, err = sjson.SetBytes(body, "stream_options.include_usage", true); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// wantsUsage reports whether c, sent in its own protocol to an account of
// an openai or openai_compat provider (openai), must ask for
// stream_options.include_usage itself: a Chat stream whose client did not.
// Without it the stream would be billed on the gateway's estimate rather
// than the upstream's counts (a translated stream asks for it anyway).
func wantsUsage(c *call, up translate.Protocol, openai bool) bool {
	return openai && up == translate.Chat && c.endpoint == translate.Chat && c.stream && !c.clientUsage
}

// continuation is the client's own continuation frame (c.wsCont) as an
// upstream WebSocket that holds its previous response gets it: with the
// target model when an alias or route() changed it (made once; as the
// client sent it should sjson fail).
func continuation(c *call) []byte {
	if c.wsCont == nil || c.target == c.model {
		return c.wsCont
	}
	if c.wsUp == nil {
		b, err := sjson.SetBytes(c.wsCont, "model", c.target) // a new slice
		if err != nil {
			return c.wsCont
		}
		c.wsUp = b
	}
	return c.wsUp
}
