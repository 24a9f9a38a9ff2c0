package translate

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Stream translation: a decoder per upstream protocol turns each upstream
// SSE event into canonical stream events (sev); an encoder per client
// protocol turns those into client SSE bytes. Decoders keep any number of
// blocks open, each under its own slot; the sequencer (sequence.go) hands
// the encoders one block at a time, so every encoder can rely on
// start → deltas → stop per block.

// StreamOptions tune NewStream.
type StreamOptions struct {
	// Model is the model name the client asked for, written into the
	// client's events ("" keeps the upstream's).
	Model string
	// IncludeUsage is for Chat clients: stream_options.include_usage was
	// asked, so a final chunk with the usage and empty choices is sent.
	IncludeUsage bool
	// Request is the client's own request body (in the client's protocol),
	// optional. For a Responses client it lets tool calls to namespace and
	// custom tools, which the request translation flattened into function
	// tools, be turned back into the calls the client expects, and its
	// settings are echoed in the response objects. The stream keeps
	// pointers into it: it must not be modified until the stream ends.
	Request []byte
	// Created is the creation time written into the client's events, in Unix
	// seconds (0: the upstream's when it has one, else now).
	Created int64
	// InputTokens is an estimate of the request's input tokens, for a
	// Messages client (0: none). Anthropic's message_start carries the
	// prompt's token count; a Chat or Responses upstream reports it only at
	// the stream's end, so message_start would say 0: it says the estimate
	// instead when the upstream has reported no input tokens by then.
	// message_delta carries the upstream's figures.
	InputTokens int64
}

// sevKind is the kind of a canonical stream event.
type sevKind uint8

const (
	sevStart      sevKind = iota + 1 // the answer begins: id, name (model), usage so far
	sevBlockStart                    // block slot opens: bk; tool calls: id (call id), name, custom, itemID
	sevDelta                         // text, reasoning text or argument fragment for block slot
	sevSignature                     // reasoning block slot's opaque state: text is the signature/encrypted/redacted data
	sevBlockStop                     // block slot closes
	sevFinish                        // the answer ends: finish, stopSeq; usage in Stream.usage
	sevError                         // the answer fails: errType, errCode, text (message)
)

// blockKind is the kind of a content block.
type blockKind uint8

const (
	blockText blockKind = iota + 1
	blockReasoning
	blockTool
	blockRefusal
)

// sigKind says what a sevSignature's data is.
type sigKind uint8

const (
	sigIsSignature     sigKind = iota + 1 // Anthropic thinking signature
	sigIsReasoningItem                    // OpenAI reasoning item (raw JSON) with encrypted_content
	sigIsRedacted                         // Anthropic redacted_thinking data
)

// sev is one canonical stream event. Its strings may point into the
// upstream event's bytes: they are valid only during the
// call that carries them, and an encoder that keeps one must copy it.
type sev struct {
	kind    sevKind
	bk      blockKind
	sig     sigKind
	slot    int32 // the block of a block event (Stream.slot)
	custom  bool
	finish  finish
	text    string
	id      string
	name    string
	itemID  string
	stopSeq string
	errType string
	errCode string
	created int64
}

// decoder reads one upstream protocol's events.
type decoder interface {
	// decode consumes one upstream event, emitting canonical events.
	decode(s *Stream, dst []byte, ev Event) ([]byte, error)
	// end is called at a clean end of stream before any terminal event; it
	// emits sevFinish when the upstream had effectively finished.
	end(s *Stream, dst []byte) []byte
}

// encoder writes one client protocol's events.
type encoder interface {
	put(s *Stream, dst []byte, e sev) []byte
}

// Stream converts one upstream SSE stream into the client's protocol, event
// by event. It is made by NewStream, one per stream, and is not safe for
// concurrent use. Its state is a few small structs; it allocates only as
// blocks open (Responses clients get every item's full text again in its
// .done events, so that text is kept).
type Stream struct {
	from, to Protocol
	opts     StreamOptions
	dec      decoder
	enc      encoder
	usage    Usage
	started  bool
	done     bool // a terminal event (finish or error) was emitted
	model    string
	id       string
	created  int64
	slots    int32 // block slots handed out
	seq      sequencer
	// wantState: 0 not yet known, 1 the upstream was asked for reasoning
	// state (encrypted_content), 2 it was not.
	wantState uint8

	toolArgs  bool   // the open block is a function tool call
	sawArgs   bool   // it has received argument fragments
	custom    bool   // the open block is a custom tool call being buffered
	customBuf []byte // its raw input so far

	chatD chatDecoder
	respD responsesDecoder
	msgD  messagesDecoder
	chatE chatEncoder
	respE responsesEncoder
	msgE  messagesEncoder
}

// ErrBadEvent is returned by Stream.Event when an upstream event cannot be
// read (its data is not the JSON its protocol promises). Nothing was
// appended; the caller should end the stream with Fail.
var ErrBadEvent = errors.New("translate: malformed upstream stream event")

// NewStream returns a Stream translating an upstream stream of protocol
// from into protocol to (from != to; for from == to the gateway passes bytes
// through and needs no Stream). It panics on an invalid protocol pair,
// which is a programming error.
func NewStream(from, to Protocol, opts StreamOptions) *Stream {
	if !from.valid() || !to.valid() || from == to {
		panic("translate: NewStream(" + from.String() + ", " + to.String() + ")")
	}
	s := &Stream{from: from, to: to, opts: opts}
	switch from {
	case Chat:
		s.chatD.reset()
		s.dec = &s.chatD
	case Responses:
		s.respD.reset()
		s.dec = &s.respD
	default:
		s.dec = &s.msgD
	}
	switch to {
	case Chat:
		s.enc = &s.chatE
	case Responses:
		s.respE.init(opts.Request)
		s.enc = &s.respE
	default:
		s.enc = &s.msgE
	}
	return s
}

// Event consumes one upstream event (as Scanner.Next returns it) and appends
// zero or more complete client events (SSE wire bytes) to dst, returning the
// extended slice. Upstream error events become the client protocol's error
// events and end the stream. After the stream has ended, events are ignored.
// Errors: ErrBadEvent (wrapped) when the event cannot be read; dst is then
// returned unchanged.
func (s *Stream) Event(dst []byte, ev Event) ([]byte, error) {
	if s.done {
		return dst, nil
	}
	return s.dec.decode(s, dst, ev)
}

// str returns the string value of r ("" when r is not a string). A string
// without escapes points into the upstream event's bytes; gjson decodes one
// with escapes into a new string (the one allocation a delta may cost).
func (s *Stream) str(r gjson.Result) string {
	if r.Type != gjson.String {
		return ""
	}
	return r.Str
}

// Finish is called at the upstream's clean end of stream; it appends what
// the client protocol still needs (Chat's usage chunk when IncludeUsage and
// "data: [DONE]"; Messages' message_delta and message_stop; Responses'
// response.completed) unless the upstream's terminal event already produced
// it. A stream that never reached a terminal event gets Fail instead.
func (s *Stream) Finish(dst []byte) []byte {
	if s.done {
		return dst
	}
	dst = s.dec.end(s, dst)
	if s.done {
		return dst
	}
	return s.Fail(dst, "server_error", "stream_incomplete", "The upstream stream ended before the response was complete.")
}

// Fail appends a well-formed terminal error in the client's protocol (Chat:
// an {"error":{...}} chunk then [DONE]; Responses: error then
// response.failed with the id the client saw; Messages: event: error) and
// ends the stream. typ and code are OpenAI-style (mapped for Messages).
// It appends nothing when the stream has already ended.
func (s *Stream) Fail(dst []byte, typ, code, message string) []byte {
	if s.done {
		return dst
	}
	return s.emit(dst, sev{kind: sevError, errType: typ, errCode: code, text: message})
}

// Done reports whether the stream has ended (a terminal event was written).
func (s *Stream) Done() bool { return s.done }

// Usage is the token usage seen so far, from any protocol's usage fields,
// in OpenAI's accounting (see Usage).
func (s *Stream) Usage() Usage { return s.usage }

// emit passes a canonical event to the encoder, block events through the
// sequencer.
func (s *Stream) emit(dst []byte, e sev) []byte {
	switch e.kind {
	case sevStart:
		if s.started {
			return dst
		}
		s.started = true
		s.id = strings.Clone(e.id)
		s.model = strings.Clone(e.name)
		if s.opts.Model != "" {
			s.model = s.opts.Model
		}
		s.created = e.created
		if s.opts.Created != 0 {
			s.created = s.opts.Created
		} else if s.created == 0 {
			s.created = time.Now().Unix()
		}
		return s.enc.put(s, dst, e)
	case sevFinish, sevError:
		if !s.started && e.kind == sevFinish {
			dst = s.emit(dst, sev{kind: sevStart})
		}
		if e.kind == sevFinish {
			dst = s.flush(dst)
		}
		s.done = true
		return s.enc.put(s, dst, e)
	}
	if !s.started {
		dst = s.emit(dst, sev{kind: sevStart})
	}
	return s.sequence(dst, e)
}

// put passes one block event of the one open block to the encoder.
func (s *Stream) put(dst []byte, e sev) []byte {
	// A tool call whose upstream sent no argument fragments (a tool
	// without parameters) gets "{}", as OpenAI itself sends.
	switch {
	case e.kind == sevBlockStart:
		s.toolArgs = e.bk == blockTool && !e.custom
		s.sawArgs = false
		if e.bk == blockTool && e.id == "" {
			// An upstream call without an id (some OpenAI-compatible
			// servers) gets one of its own, unique in the stream, so the
			// client can answer it.
			e.id = idWithPrefix("call_", s.id) + "_" + strconv.Itoa(int(e.slot))
		}
	case e.kind == sevDelta && s.toolArgs && e.text != "":
		s.sawArgs = true
	case e.kind == sevBlockStop && s.toolArgs:
		s.toolArgs = false
		if !s.sawArgs {
			dst = s.enc.put(s, dst, sev{kind: sevDelta, bk: blockTool, slot: e.slot, text: "{}"})
		}
	}
	if s.to != Responses {
		// A custom (freeform) tool call has raw input; Chat and Messages
		// clients get function-style JSON arguments {"input": "…"},
		// sent whole when the call ends.
		switch {
		case e.kind == sevBlockStart:
			s.custom = e.bk == blockTool && e.custom
			s.customBuf = s.customBuf[:0]
		case e.kind == sevDelta && s.custom:
			s.customBuf = append(s.customBuf, e.text...)
			return dst
		case e.kind == sevBlockStop && s.custom:
			s.custom = false
			args := append([]byte(`{"input":`), AppendString(nil, b2s(s.customBuf))...)
			dst = s.enc.put(s, dst, sev{kind: sevDelta, bk: blockTool, slot: e.slot, text: b2s(append(args, '}'))})
		}
	}
	return s.enc.put(s, dst, e)
}

// wantsReasoningState reports whether the upstream was asked for
// encrypted reasoning: the request translation asks a Responses upstream
// for it (include reasoning.encrypted_content) exactly when it asks for
// reasoning, which for a Messages client is when its thinking or
// output_config.effort is on. Without the client's request it assumes so.
func (s *Stream) wantsReasoningState() bool {
	if s.wantState == 0 {
		s.wantState = 1
		if s.to == Messages && len(s.opts.Request) > 0 {
			var rq request
			if decodeThinking(getB(s.opts.Request, "thinking"), &rq) == nil {
				rq.reasoning.effort = openAIEffort(getB(s.opts.Request, "output_config.effort").Str)
			}
			if e, sum := responsesReasoning(&rq.reasoning); e == "" && sum == "" {
				s.wantState = 2
			}
		}
	}
	return s.wantState == 1
}

// badEvent wraps ErrBadEvent with the event's name.
func badEvent(what string) error { return &eventError{what: what} }

type eventError struct{ what string }

func (e *eventError) Error() string { return ErrBadEvent.Error() + ": " + e.what }
func (e *eventError) Unwrap() error { return ErrBadEvent }
