package harness

import (
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
)

// summarize picks the headline figures of rep: added latency from the first
// open-loop non-stream phase with a baseline (else the first open-loop one
// with a baseline), added TTFT from the first streamed (SSE) open-loop
// phase with a baseline, the WebSocket figures from the first open-loop
// responses_ws phase with a baseline, throughput from the first
// closed-loop phase (else the headline phase), CPU per request from the headline phase, and memory
// from the run's last sample and the first hold phase. What could not be
// measured is listed in Missing.
func summarize(rep *report.Report) report.Summary {
	var s report.Summary
	var head, stream, thr, ws *report.Phase
	for i := range rep.Phases {
		p := &rep.Phases[i]
		hasBase := p.Direct != nil && p.Gateway != nil
		switch {
		case p.Mode == string(scenario.Open) && hasBase && !p.Stream && (head == nil || head.Stream):
			head = p
		case p.Mode == string(scenario.Open) && hasBase && head == nil:
			head = p
		}
		isWS := p.API == string(scenario.ResponsesWS)
		if p.Mode == string(scenario.Open) && hasBase && isWS && ws == nil {
			ws = p
		}
		if p.Mode == string(scenario.Open) && hasBase && p.Stream && !isWS && stream == nil {
			stream = p
		}
		if p.Mode == string(scenario.Closed) && thr == nil {
			thr = p
		}
		if p.Gateway != nil {
			s.GatewayErrors += p.Gateway.Errors
			s.GatewayRequests += p.Gateway.OK + p.Gateway.Errors
		}
		if p.Direct != nil {
			s.DirectErrors += p.Direct.Errors
		}
	}
	if head != nil {
		s.HeadlinePhase = head.Name
		s.AddedP50us = head.Added["p50_us"].Median
		s.AddedP90us = head.Added["p90_us"].Median
		s.AddedP99us = head.Added["p99_us"].Median
		s.AddedP999us = head.Added["p99_9_us"].Median
		if head.CPUusPerRequest != nil {
			s.CPUusPerRequest = head.CPUusPerRequest.Median
			s.CPUsPer1000 = s.CPUusPerRequest / 1000
		}
	} else {
		s.Missing = append(s.Missing, "added latency (no open-loop phase with a direct baseline)")
	}
	if s.CPUusPerRequest == 0 {
		s.Missing = append(s.Missing, "gateway CPU per request (no gateway process id, or no headline phase)")
	}
	if stream != nil {
		s.StreamPhase = stream.Name
		s.AddedTTFTP50us = stream.Added["ttft_p50_us"].Median
		s.AddedTTFTP99us = stream.Added["ttft_p99_us"].Median
	} else {
		s.Missing = append(s.Missing, "added TTFT (no streamed open-loop phase with a direct baseline)")
	}
	if ws != nil {
		s.WSPhase = ws.Name
		s.AddedWSP50us = ws.Added["p50_us"].Median
		s.AddedWSP99us = ws.Added["p99_us"].Median
		s.AddedWSTTFTP99us = ws.Added["ttft_p99_us"].Median
	}
	if thr == nil {
		thr = head
	}
	if thr != nil {
		s.ThroughputPhase = thr.Name
		if thr.Gateway != nil {
			s.GatewayRPS = thr.Gateway.RPS.Median
		}
		if thr.Direct != nil {
			s.DirectRPS = thr.Direct.RPS.Median
		}
		if s.DirectRPS > 0 {
			s.ThroughputRatio = s.GatewayRPS / s.DirectRPS
		}
	}
	if rep.Memory != nil {
		s.RSSAfterLoad = rep.Memory.RSSAfterLoad
	} else {
		s.Missing = append(s.Missing, "gateway memory (no gateway process id)")
	}
	if len(rep.Holds) > 0 {
		s.BytesPerStream = rep.Holds[0].BytesPerStream
	}
	for _, f := range rep.Failover {
		s.FailoverP50usByK = append(s.FailoverP50usByK, report.KV{K: f.K, V: f.TTFT.P50us})
	}
	if !rep.WebSocket.Measured {
		s.Missing = append(s.Missing, "Responses WebSocket: "+rep.WebSocket.Reason)
	}
	return s
}
