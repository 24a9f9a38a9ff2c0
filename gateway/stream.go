package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// maxEvent bounds one upstream SSE event (a Responses "response.completed"
// carries the whole answer, so it is generous).
const maxEvent = 32 << 20

// stream is a committed SSE answer being relayed from one upstream to the
// client. fasthttp drives it: WriteTo is the body writer (every Write is one
// flushed HTTP chunk) and Close runs once when the body is done or the
// connection failed, so the lease is released exactly once on every path.
type stream struct {
	s      *Server
	c      *call
	lease  *actors.Lease
	resp   *upstream.Response
	sc     *translate.Scanner
	cancel context.CancelFunc
	start  time.Time // when the attempt started
	ttft   time.Duration
	usage  usage
	clean  bool  // the upstream stream ended with a terminal event
	werr   error // a write to the client failed: the client went away
	rerr   error // the upstream stream broke
	once   sync.Once
	buf    []byte
}

var scanners = sync.Pool{New: func() any { return translate.NewScanner(nil, maxEvent) }}

func (s *Server) newStream(c *call, l *actors.Lease, resp *upstream.Response, start time.Time) *stream {
	sc := scanners.Get().(*translate.Scanner)
	sc.Reset(resp.Body)
	return &stream{s: s, c: c, lease: l, resp: resp, sc: sc, start: start}
}

// commitStream writes the stream's headers; fasthttp then calls WriteTo.
func (s *Server) commitStream(ctx *fasthttp.RequestCtx, c *call, r result) {
	ctx.SetStatusCode(r.status)
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetBodyStream(r.stream, -1)
}

// SupportsBodyWriteTo tells fasthttp to call WriteTo rather than Read.
func (st *stream) SupportsBodyWriteTo() bool { return true }

// Read is never used by fasthttp (WriteTo is); it exists to satisfy io.Reader.
func (st *stream) Read([]byte) (int, error) {
	return 0, errors.New("gateway: stream is written with WriteTo")
}

// WriteTo relays events as they arrive, one flushed chunk per write. Events
// already buffered from the upstream are coalesced into one write.
func (st *stream) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		ev, err := st.sc.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				st.rerr = err
			}
			break
		}
		st.observe(ev)
		st.buf = append(st.buf[:0], st.sc.Raw()...)
		if !bytes.HasSuffix(st.buf, []byte("\n\n")) && !bytes.HasSuffix(st.buf, []byte("\r\n\r\n")) {
			st.buf = append(st.buf, '\n') // an event the upstream ended without a blank line
		}
		m, err := w.Write(st.buf)
		n += int64(m)
		if err != nil {
			st.werr = err
			return n, err
		}
	}
	if !st.clean {
		// The upstream broke after commit: end with a well-formed error event
		// rather than a silent truncation.
		st.buf = appendStreamError(st.buf[:0], st.c.endpoint, "The upstream stream ended unexpectedly.")
		m, err := w.Write(st.buf)
		n += int64(m)
		if err != nil {
			st.werr = err
			return n, err
		}
	}
	return n, nil
}

// observe takes what the gateway needs from an event: time to first content,
// usage, and whether the stream ended properly.
func (st *stream) observe(ev translate.Event) {
	if st.ttft == 0 && isContent(st.c.endpoint, ev) {
		st.ttft = st.s.now().Sub(st.start)
	}
	switch st.c.endpoint {
	case upstream.EndpointChat:
		if bytes.Equal(ev.Data, doneMarker) || bytes.Contains(ev.Data, finishKey) {
			// [DONE] ends OpenAI streams; some compatible upstreams stop at the
			// chunk carrying finish_reason instead.
			st.clean = true
		}
		if bytes.Contains(ev.Data, usageKey) {
			if u, ok := chatUsage(ev.Data); ok {
				st.usage = u
			}
		}
	case upstream.EndpointResponses:
		switch string(ev.Name) {
		case "response.completed", "response.incomplete", "response.failed":
			st.clean = true
			st.usage = responsesUsage(ev.Data)
		}
	}
}

var (
	doneMarker = []byte("[DONE]")
	usageKey   = []byte(`"usage":{`)
	finishKey  = []byte(`"finish_reason":"`)
)

// Close ends the stream once: it closes the upstream body, releases the lease
// with the outcome and records usage. fasthttp calls it when the body is
// written or the connection failed.
func (st *stream) Close() error {
	st.once.Do(st.close)
	return nil
}

func (st *stream) close() {
	st.cancel()
	st.resp.Body.Close()
	scanners.Put(st.sc)
	st.sc = nil
	s, c := st.s, st.c
	lat := s.now().Sub(st.start)
	v := upstream.Verdict{}
	switch {
	case st.werr != nil:
		v.Class = upstream.ClassCanceled
	case st.rerr != nil || !st.clean:
		v.Class = upstream.ClassTransient
	}
	s.release(st.lease, st.resp.Status, v, st.start, st.ttft)
	if st.ttft > 0 {
		s.metrics.ttft.WithLabelValues(c.endpoint.String()).Observe(st.ttft.Seconds())
	}
	status := st.resp.Status
	if v.Class == upstream.ClassNone {
		s.record(c, st.lease, status, st.usage, lat, st.ttft)
	} else if v.Class == upstream.ClassCanceled {
		status = 499
	}
	s.finish(c, status)
}
