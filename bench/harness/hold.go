package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/bench/load"
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
)

// runHold opens p.Concurrency streams through the gateway and measures the
// gateway's resident memory before and while they are open.
func runHold(ctx context.Context, cfg Config, p scenario.Phase, mem *memWatch) (report.Hold, error) {
	h := report.Hold{Name: p.Name, Streams: p.Concurrency}
	mem.sample()
	h.RSSBefore = mem.last
	if cfg.HoldKey == "" {
		return h, fmt.Errorf("harness: hold phase %s needs an API key for group %s", p.Name, scenario.HoldGroup)
	}
	target := load.Target{Name: "gateway", BaseURL: cfg.Gateway.BaseURL, Keys: []string{cfg.HoldKey}}
	call := load.Call{API: p.API, Stream: true, Model: cfg.Scenario.Model, Timeout: p.Timeout}
	res, err := load.Hold{Streams: p.Concurrency, Duration: p.Duration, OpenTimeout: p.Timeout}.Run(ctx, target, call, func() {
		mem.sample()
		h.RSSOpen = mem.last
	})
	h.Open, h.Errors = res.Open, res.Errors
	if h.Open > 0 && mem.ok {
		h.BytesPerStream = float64(h.RSSOpen-h.RSSBefore) / float64(h.Open)
	}
	// Give the gateway time to notice the closed streams before what follows.
	time.Sleep(time.Second)
	return h, err
}
