package translate

import (
	"errors"
	"strings"
	"time"
)

// ResponseOptions tune TranslateResponse.
type ResponseOptions struct {
	// Model is the model name the client asked for, written into the answer
	// ("" keeps the upstream's).
	Model string
	// Request is the client's own request body (in the client's protocol),
	// optional. For a Responses client it lets tool calls to namespace and
	// custom tools, which the request translation flattened into function
	// tools, be turned back into the calls the client expects, and its
	// settings are echoed in the response object.
	Request []byte
	// Created is the creation time written into the answer, in Unix seconds
	// (0: the upstream's when it has one, else now).
	Created int64
}

// ErrUpstreamFailed is returned by TranslateResponse for a 2xx Responses
// body whose status is "failed": it is an error, not an answer.
var ErrUpstreamFailed = errors.New("translate: the upstream response has status failed")

// TranslateResponse converts a non-stream 2xx answer body of protocol from
// into protocol to (from != to). Errors: *Error when the body is not a valid
// answer of protocol from, ErrUpstreamFailed for a failed Responses answer.
func TranslateResponse(from, to Protocol, body []byte, opts ResponseOptions) ([]byte, error) {
	if !from.valid() || !to.valid() || from == to {
		return nil, badRequest("", "no translation from "+from.String()+" to "+to.String())
	}
	root, err := parseBody(body, "the upstream answer")
	if err != nil {
		return nil, err
	}
	var rs *response
	switch from {
	case Chat:
		rs, err = decodeChatResponse(root)
	case Responses:
		rs, err = decodeResponsesResponse(root)
	default:
		rs, err = decodeMessagesResponse(root)
	}
	if err != nil {
		return nil, err
	}
	if opts.Model != "" {
		rs.model = opts.Model
	}
	if opts.Created != 0 {
		rs.created = opts.Created
	} else if rs.created == 0 {
		rs.created = time.Now().Unix()
	}
	out := make([]byte, 0, len(body)+256)
	switch to {
	case Chat:
		return encodeChatResponse(out, rs), nil
	case Responses:
		tn := loadToolNames(opts.Request)
		for i := range rs.parts {
			tn.restore(&rs.parts[i])
		}
		echo := loadResponsesEcho(opts.Request)
		return encodeResponsesResponse(out, rs, &echo), nil
	default:
		return encodeMessagesResponse(out, rs), nil
	}
}

// restore turns a flat tool call back into the namespace or custom tool call
// the client's request declared.
func (tn *toolNames) restore(p *part) {
	if p.typ != partToolCall {
		return
	}
	n, ok := tn.lookup(p.name)
	if !ok {
		return
	}
	p.name, p.namespace = n.name, n.namespace
	if n.custom && !p.custom {
		p.custom = true
		p.args = customInput(p.args)
	}
}

// idWithPrefix returns id when it starts with prefix, else prefix + id
// without its own prefix (everything up to the first '_' or '-').
func idWithPrefix(prefix, id string) string {
	if strings.HasPrefix(id, prefix) {
		return id
	}
	if i := strings.IndexAny(id, "_-"); i >= 0 && i < 10 {
		id = id[i+1:]
	}
	if id == "" {
		id = "troupe"
	}
	return prefix + id
}

// hasToolCall reports whether ps has a tool call.
func hasToolCall(ps []part) bool {
	for i := range ps {
		if ps[i].typ == partToolCall {
			return true
		}
	}
	return false
}
