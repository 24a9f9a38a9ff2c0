package translate

// RequestOptions tune TranslateRequest.
type RequestOptions struct {
	// Model is the upstream model name to write into the body ("" keeps the
	// body's own model).
	Model string
}

// TranslateRequest converts a request body of protocol from into one of
// protocol to (from != to). The "stream" flag is kept; a streamed request to
// a Chat upstream always asks for stream_options.include_usage, so that
// usage reaches every client protocol. Errors are *Error (status 400): the
// body is malformed for its protocol, or it uses something the target
// cannot express (docs/translation.md lists what and why).
func TranslateRequest(from, to Protocol, body []byte, opts RequestOptions) ([]byte, error) {
	if !from.valid() || !to.valid() || from == to {
		return nil, badRequest("", "no translation from "+from.String()+" to "+to.String())
	}
	rq, err := decodeRequest(from, body)
	if err != nil {
		return nil, err
	}
	if opts.Model != "" {
		rq.model = opts.Model
	}
	if rq.model == "" {
		return nil, badRequest("model", "model is required")
	}
	out := make([]byte, 0, len(body)+len(body)/4+256)
	switch to {
	case Chat:
		return encodeChatRequest(out, rq, from)
	case Responses:
		return encodeResponsesRequest(out, rq, from)
	default:
		return encodeMessagesRequest(out, rq, from)
	}
}

func decodeRequest(from Protocol, body []byte) (*request, error) {
	root, err := parseBody(body, "the request body")
	if err != nil {
		return nil, err
	}
	switch from {
	case Chat:
		return decodeChatRequest(root)
	case Responses:
		return decodeResponsesRequest(root)
	default:
		return decodeMessagesRequest(root)
	}
}
