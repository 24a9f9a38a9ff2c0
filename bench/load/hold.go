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
	hs := &holder{body: c.body(call), url: t.BaseURL + "/chat/completions", errs: map[string]int64{}}
	if call.API == scenario.Responses {
		hs.url = t.BaseURL + "/responses"
	}
	tr := &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hs.hc = &http.Client{Transport: tr}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var streams sync.WaitGroup
	hs.headers.Add(h.Streams)
	for i := range h.Streams {
		streams.Go(func() { hs.hold(sctx, t.Keys[i%len(t.Keys)]) })
	}
	waitGroup(&hs.headers, openTimeout)
	select {
	case <-time.After(h.Duration):
	case <-ctx.Done():
	}
	res := HoldResult{Open: int(hs.live.Load())}
	whileOpen()
	cancel()
	waitGroup(&streams, 10*time.Second)
	hs.mu.Lock()
	res.Errors = hs.errs
	hs.mu.Unlock()
	return res, ctx.Err()
}

// holder is the state of one Hold's streams.
type holder struct {
	hc      *http.Client
	url     string
	body    []byte
	headers sync.WaitGroup // one per stream: done when its headers came, or it failed first
	live    atomic.Int64   // streams open now
	mu      sync.Mutex
	errs    map[string]int64 // failures by class
}

func (hs *holder) fail(class string) {
	hs.mu.Lock()
	hs.errs[class]++
	hs.mu.Unlock()
}

// hold opens one stream with key and reads it until ctx ends; a stream
// that could not open, or ended before, counts as a failure of its class.
func (hs *holder) hold(ctx context.Context, key string) {
	gotHeaders := false
	defer func() {
		if !gotHeaders {
			hs.headers.Done()
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.url, bytes.NewReader(hs.body))
	if err != nil {
		hs.fail("request")
		return
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hs.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			hs.fail("connect")
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		hs.fail(fmt.Sprintf("status_%d", resp.StatusCode))
		return
	}
	hs.live.Add(1)
	defer hs.live.Add(-1)
	gotHeaders = true
	hs.headers.Done()
	br := bufio.NewReader(resp.Body)
	for {
		if _, err := br.ReadSlice('\n'); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if ctx.Err() == nil {
				hs.fail("ended_early")
			}
			return
		}
	}
}
