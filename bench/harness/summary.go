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
	ph := pickPhases(rep, &s)
	if head := ph.head; head != nil {
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
	if stream := ph.stream; stream != nil {
		s.StreamPhase = stream.Name
		s.AddedTTFTP50us = stream.Added["ttft_p50_us"].Median
		s.AddedTTFTP99us = stream.Added["ttft_p99_us"].Median
	} else {
		s.Missing = append(s.Missing, "added TTFT (no streamed open-loop phase with a direct baseline)")
	}
	if ws := ph.ws; ws != nil {
		s.WSPhase = ws.Name
		s.AddedWSP50us = ws.Added["p50_us"].Median
		s.AddedWSP99us = ws.Added["p99_us"].Median
		s.AddedWSTTFTP99us = ws.Added["ttft_p99_us"].Median
	}
	summarizeThroughput(&s, ph)
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

// headlinePhases are the phases summarize reads each figure from (nil
// where the run has none).
type headlinePhases struct {
	head   *report.Phase // added latency and CPU: open loop, with a baseline, non-stream first
	stream *report.Phase // added TTFT: open loop, with a baseline, SSE
	ws     *report.Phase // the Responses WebSocket's added figures
	thr    *report.Phase // throughput: the first closed-loop phase
}

// pickPhases chooses rep's headline phases (see summarize) and adds up the
// requests and errors of every phase into s.
func pickPhases(rep *report.Report, s *report.Summary) headlinePhases {
	var ph headlinePhases
	for i := range rep.Phases {
		p := &rep.Phases[i]
		hasBase := p.Direct != nil && p.Gateway != nil
		switch {
		case p.Mode == string(scenario.Open) && hasBase && !p.Stream && (ph.head == nil || ph.head.Stream):
			ph.head = p
		case p.Mode == string(scenario.Open) && hasBase && ph.head == nil:
			ph.head = p
		}
		isWS := p.API == string(scenario.ResponsesWS)
		if p.Mode == string(scenario.Open) && hasBase && isWS && ph.ws == nil {
			ph.ws = p
		}
		if p.Mode == string(scenario.Open) && hasBase && p.Stream && !isWS && ph.stream == nil {
			ph.stream = p
		}
		if p.Mode == string(scenario.Closed) && ph.thr == nil {
			ph.thr = p
		}
		if p.Gateway != nil {
			s.GatewayErrors += p.Gateway.Errors
			s.GatewayRequests += p.Gateway.OK + p.Gateway.Errors
		}
		if p.Direct != nil {
			s.DirectErrors += p.Direct.Errors
		}
	}
	return ph
}

// summarizeThroughput fills s's throughput from the first closed-loop
// phase, else the headline phase: the gateway's and the direct requests
// per second, and their ratio.
func summarizeThroughput(s *report.Summary, ph headlinePhases) {
	thr := ph.thr
	if thr == nil {
		thr = ph.head
	}
	if thr == nil {
		return
	}
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
