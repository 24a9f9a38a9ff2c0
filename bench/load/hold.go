package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/bench/scenario"
)

// Hold opens Streams streamed requests at once and keeps them open: the
// harness samples the gateway's memory while they are.
type Hold struct {
	Streams int
	// Duration is how long the streams stay open once all have their
	// response headers (or OpenTimeout passed).
	Duration time.Duration
	// OpenTimeout bounds the wait for every stream's headers (default 30s).
	OpenTimeout time.Duration
}

// HoldResult is what a Hold saw.
type HoldResult struct {
	// Open is the number of streams that had their 200 headers and had not
	// ended when whileOpen ran.
	Open   int
	Errors map[string]int64
}

// Run opens the streams against t, waits until they are open, sleeps
// Duration, calls whileOpen, then closes them all and returns. It uses
// net/http (one connection per stream) so that streams can be cut at once.
func (h Hold) Run(ctx context.Context, t Target, call Call, whileOpen func()) (HoldResult, error) {
	if len(t.Keys) == 0 {
		return HoldResult{}, fmt.Errorf("load: target %s has no key", t.Name)
	}
	openTimeout := h.OpenTimeout
	if openTimeout <= 0 {
		openTimeout = 30 * time.Second
	}
	c := &Client{target: t}
	body := c.body(call)
	url := t.BaseURL + "/chat/completions"
	if call.API == scenario.Responses {
		url = t.BaseURL + "/responses"
	}
	tr := &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu      sync.Mutex
		errs    = map[string]int64{}
		headers sync.WaitGroup
		streams sync.WaitGroup
		live    atomic.Int64
	)
	fail := func(class string) {
		mu.Lock()
		errs[class]++
		mu.Unlock()
	}
	headers.Add(h.Streams)
	for i := range h.Streams {
		streams.Add(1)
		go func() {
			defer streams.Done()
			gotHeaders := false
			defer func() {
				if !gotHeaders {
					headers.Done()
				}
			}()
			req, err := http.NewRequestWithContext(sctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				fail("request")
				return
			}
			req.Header.Set("Authorization", "Bearer "+t.Keys[i%len(t.Keys)])
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				if sctx.Err() == nil {
					fail("connect")
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				fail(fmt.Sprintf("status_%d", resp.StatusCode))
				return
			}
			live.Add(1)
			defer live.Add(-1)
			gotHeaders = true
			headers.Done()
			br := bufio.NewReader(resp.Body)
			for {
				if _, err := br.ReadSlice('\n'); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
					if sctx.Err() == nil {
						fail("ended_early")
					}
					return
				}
			}
		}()
	}
	waitGroup(&headers, openTimeout)
	select {
	case <-time.After(h.Duration):
	case <-ctx.Done():
	}
	res := HoldResult{Open: int(live.Load())}
	whileOpen()
	cancel()
	waitGroup(&streams, 10*time.Second)
	mu.Lock()
	res.Errors = errs
	mu.Unlock()
	return res, ctx.Err()
}
