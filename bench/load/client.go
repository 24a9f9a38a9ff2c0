// Package load drives HTTP load at an OpenAI-compatible endpoint: open-loop
// (a constant arrival rate, every latency measured from the request's
// intended start, so a slow server cannot hide its queueing: no coordinated
// omission), closed-loop (a fixed number of workers sending back to back, for
// maximum throughput) and held-open streams. Results go into HDR histograms
// (package bench/hist).
package load

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/scenario"
	"github.com/valyala/fasthttp"
)

// Target is an OpenAI-compatible base URL and the bearer tokens to use on
// it, in turn (the gateway: one API key; the mock fleet directly: the
// accounts' tokens, which spreads the baseline over the fleet as a gateway
// would).
type Target struct {
	// Name labels the target in reports: "direct" or "gateway".
	Name string
	// BaseURL ends in /v1, e.g. http://127.0.0.1:8080/v1 (http or https).
	BaseURL string
	// Keys are bearer tokens used in turn, from the first; at least one.
	Keys []string
}

// Call is what one request asks for.
type Call struct {
	API    scenario.API
	Stream bool
	Model  string
	// Timeout bounds the whole request, body included.
	Timeout time.Duration
}

// Result is the outcome of one request. Times are from the request's start
// as given to Client.Do (for open-loop load, its intended send time).
type Result struct {
	// Latency is the time until the response was read completely.
	Latency time.Duration
	// TTFT is the time until the first content: the first event carrying
	// answer text for a stream, the whole answer for JSON.
	TTFT time.Duration
	// Service is Latency measured from when the request actually left
	// rather than from start: it leaves out the load generator's own
	// lateness (and, open-loop, hides queueing in the generator), so it is
	// reported beside Latency, never instead of it.
	Service time.Duration
	// Status is the HTTP status, 0 when none was received.
	Status int
	// Err is empty on success, else a short class: "status_429",
	// "timeout", "connect", "incomplete_stream", "io".
	Err string
}

// Client sends Calls to one Target over a pool of keep-alive connections.
// It is safe for concurrent use.
type Client struct {
	hc     *fasthttp.HostClient
	target Target
	url    map[scenario.API]string
	auth   [][]byte // "Bearer " + key, per key
	next   atomic.Uint64
	bodies sync.Map // Call (without Timeout) → []byte
}

// NewClient returns a client for t holding at most maxConns connections.
func NewClient(t Target, maxConns int) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(t.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("load: target %q: want an http(s) base URL such as http://127.0.0.1:8080/v1", t.BaseURL)
	}
	if len(t.Keys) == 0 {
		return nil, fmt.Errorf("load: target %s has no key", t.Name)
	}
	addr := u.Host
	if u.Port() == "" {
		addr += map[string]string{"http": ":80", "https": ":443"}[u.Scheme]
	}
	c := &Client{
		target: t,
		hc: &fasthttp.HostClient{
			Addr:                          addr,
			IsTLS:                         u.Scheme == "https",
			MaxConns:                      maxConns,
			StreamResponseBody:            true,
			MaxIdleConnDuration:           30 * time.Second,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
			ReadBufferSize:                16 << 10,
		},
		url: map[scenario.API]string{
			scenario.Chat:      u.String() + "/chat/completions",
			scenario.Responses: u.String() + "/responses",
		},
	}
	for _, k := range t.Keys {
		c.auth = append(c.auth, []byte("Bearer "+k))
	}
	return c, nil
}

// Target returns the client's target.
func (c *Client) Target() Target { return c.target }

// body returns the JSON body of call, built once per shape.
func (c *Client) body(call Call) []byte {
	k := call
	k.Timeout = 0
	if b, ok := c.bodies.Load(k); ok {
		return b.([]byte)
	}
	var b []byte
	switch call.API {
	case scenario.Responses:
		b = fmt.Appendf(nil, `{"model":%q,"input":"Say hello.","stream":%t}`, call.Model, call.Stream)
	default:
		b = fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Say hello."}],"stream":%t}`, call.Model, call.Stream)
	}
	c.bodies.Store(k, b)
	return b
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// Do sends call and reads its answer; start is the instant latencies are
// measured from (a time at or before now).
func (c *Client) Do(call Call, start time.Time) Result {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.url[call.API])
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.SetBytesV("Authorization", c.auth[(c.next.Add(1)-1)%uint64(len(c.auth))])
	req.SetBodyRaw(c.body(call))
	sent := time.Now()
	deadline := sent.Add(call.Timeout)
	var res Result
	if err := c.hc.DoDeadline(req, resp, deadline); err != nil {
		res.Latency = time.Since(start)
		res.Err = errClass(err)
		return res
	}
	res.Status = resp.StatusCode()
	br := readers.Get().(*bufio.Reader)
	br.Reset(resp.BodyStream())
	defer readers.Put(br)
	var err error
	if call.Stream && res.Status == fasthttp.StatusOK {
		err = readStream(br, call.API, start, &res)
	} else {
		_, err = br.WriteTo(discard{})
		res.TTFT = time.Since(start)
	}
	end := time.Now() // one end for both, so Latency-Service is exactly the lateness
	res.Latency = end.Sub(start)
	res.Service = end.Sub(sent)
	_ = resp.CloseBodyStream()
	br.Reset(nil)
	switch {
	case err != nil:
		res.Err = errClass(err)
	case res.Status != fasthttp.StatusOK:
		res.Err = fmt.Sprintf("status_%d", res.Status)
	}
	return res
}

// errIncomplete is a stream that ended without its terminal event.
var errIncomplete = errors.New("incomplete_stream")

// readStream reads an SSE answer to its end, setting res.TTFT at the first
// content event: a Chat chunk with non-empty choices[0].delta.content, or a
// Responses response.output_text.delta event. The stream must end with its
// terminal event (Chat: data: [DONE]; Responses: response.completed).
func readStream(br *bufio.Reader, api scenario.API, start time.Time, res *Result) error {
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // an event longer than the buffer: skip the rest of the line
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
		}
		if len(line) > 6 && bytes.HasPrefix(line, []byte("data: ")) {
			data := line[6:]
			if res.TTFT == 0 && isContent(api, data) {
				res.TTFT = time.Since(start)
			}
			if isTerminal(api, data) {
				done = true
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if !done || res.TTFT == 0 {
					return errIncomplete
				}
				return nil
			}
			return err
		}
	}
}

var (
	chatDone      = []byte("[DONE]")
	respDelta     = []byte(`"type":"response.output_text.delta"`)
	respCompleted = []byte(`"type":"response.completed"`)
)

func isContent(api scenario.API, data []byte) bool {
	if api == scenario.Responses {
		return bytes.Contains(data, respDelta)
	}
	return gjson.GetBytes(data, "choices.0.delta.content").String() != ""
}

func isTerminal(api scenario.API, data []byte) bool {
	if api == scenario.Responses {
		return bytes.Contains(data, respCompleted)
	}
	return bytes.HasPrefix(data, chatDone)
}

// errClass names an error briefly for the report.
func errClass(err error) string {
	switch {
	case errors.Is(err, errIncomplete):
		return "incomplete_stream"
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		return "timeout"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no_free_conns"
	case strings.Contains(err.Error(), "dial"), strings.Contains(err.Error(), "connection refused"):
		return "connect"
	case strings.Contains(err.Error(), "timeout"):
		return "timeout"
	}
	return "io"
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
