package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Text returns the human summary printed on stdout: per phase the pooled
// figures of each target and the added latency (median [min … max] over
// rounds, or noise(±floor) below the noise floor), then holds, failover,
// memory, the verdict (Verdict.Lines) and the notes.
func (r *Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "troupe bench %s: %s (mode %s, target %s)\n", r.Scenario.Name, r.StartedAt, r.Mode, r.Target)
	fmt.Fprintf(&b, "machine: %d CPUs %s, load average at start %s; troupe %s, %s\n\n", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.LoadAvg, r.Versions.Troupe, r.Versions.Go)
	r.writePhases(&b)
	r.writeAdded(&b)
	for _, h := range r.Holds {
		fmt.Fprintf(&b, "\n%s: %d of %d streams open; %s; errors: %s\n", h.Name, h.Open, h.Streams, h.MemoryText(), ErrorList(h.Errors))
	}
	if len(r.Failover) > 0 {
		b.WriteString("\nfailover: time to first content after k failed attempts (gateway, sequential requests):\n")
		if d := r.FailoverDirect; d != nil {
			fmt.Fprintf(&b, "  direct to the mock: TTFT p50 %.0f µs p90 %.0f µs p99 %.0f µs\n", d.P50us, d.P90us, d.P99us)
		}
		for _, f := range r.Failover {
			fmt.Fprintf(&b, "  k=%d: %d requests, attempts/request %.2f, TTFT p50 %.0f µs p90 %.0f µs p99 %.0f µs, errors: %s\n",
				f.K, f.Requests, f.AttemptsPerRequest, f.TTFT.P50us, f.TTFT.P90us, f.TTFT.P99us, ErrorList(f.Errors))
		}
	}
	if f := r.Fleet; f != nil {
		fmt.Fprintf(&b, "\nfleet: %d instances (fleet.ttl %gs, heartbeat %gs), owned accounts %v; the first answered %.0f requests with %.0f remote grants: %.1f%% remote\n",
			f.Instances, f.TTLs, f.HeartbeatS, f.Owned, f.Requests, f.RemoteGrants, 100*f.RemoteShare)
		fmt.Fprintf(&b, "  kill -9 of the last (%d accounts): survivors own every account after %.2fs; meanwhile %d workers sent %d requests to the first, errors: %s\n",
			f.KilledOwned, f.RecoveryS, f.KillWorkers, f.KillRequests, ErrorList(f.KillErrors))
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(&b, "\ngateway RSS: %.1f MiB at start, %.1f MiB max seen, %.1f MiB after load\n", mib(m.RSSStart), mib(m.RSSMax), mib(m.RSSAfterLoad))
	}
	if lines := r.Verdict().Lines(); len(lines) > 0 {
		b.WriteString("\nverdict:\n")
		for _, l := range lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

// writePhases writes the table of pooled figures: per phase, a row for
// each target measured.
func (r *Report) writePhases(b *strings.Builder) {
	tw := tabwriter.NewWriter(b, 2, 4, 2, ' ', tabwriter.AlignRight)
	if len(r.Phases) > 0 {
		fmt.Fprintln(tw, "phase\ttarget\tok\terrors\treq/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tTTFT p50\tTTFT p99\tCPU µs/req\t")
	}
	for _, p := range r.Phases {
		for _, t := range []struct {
			name string
			p    *Pooled
		}{{"direct", p.Direct}, {"gateway", p.Gateway}} {
			if t.p == nil {
				continue
			}
			cpu := ""
			if t.name == "gateway" && p.CPUusPerRequest != nil {
				cpu = fmt.Sprintf("%.0f", p.CPUusPerRequest.Median)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", p.Name, t.name, t.p.OK, t.p.Errors, t.p.RPS.Median,
				t.p.Latency.P50us, t.p.Latency.P90us, t.p.Latency.P99us, t.p.Latency.P999us, t.p.TTFT.P50us, t.p.TTFT.P99us, cpu)
		}
	}
	tw.Flush()
}

// writeAdded writes what the gateway added per phase: median [min … max]
// over rounds, or noise(±floor) below the noise floor.
func (r *Report) writeAdded(b *strings.Builder) {
	any := false
	for _, p := range r.Phases {
		if len(p.Added) == 0 {
			continue
		}
		if !any {
			b.WriteString("\nadded by the gateway (gateway − direct, per round; median [min … max] over rounds, µs;\n" +
				"noise(±N): below the noise floor N, how much the direct baseline itself moved between rounds):\n")
			any = true
		}
		fmt.Fprintf(b, "  %s:\n", p.Name)
		for _, line := range [][]string{{"p50_us", "p90_us", "p99_us", "p99_9_us"}, {"ttft_p50_us", "ttft_p90_us", "ttft_p99_us"}, {"service_p50_us", "service_p99_us"}} {
			n := 0
			for _, k := range line {
				if s, ok := p.Added[k]; ok {
					if n == 0 {
						b.WriteString("   ")
					}
					name := strings.TrimSuffix(k, "_us")
					if f, _ := p.Figure(k); f.Noise {
						fmt.Fprintf(b, "  %s noise(±%.0f) [%.0f … %.0f]", name, f.Bound(), s.Min, s.Max)
					} else {
						fmt.Fprintf(b, "  %s %.0f [%.0f … %.0f]", name, s.Median, s.Min, s.Max)
					}
					n++
				}
			}
			if n > 0 {
				b.WriteString("\n")
			}
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// MemoryText is the hold's memory as the summary prints it: the gateway's
// RSS before and with the streams open and the cost per open stream, or
// that it was not measured (troupe bench --target without --pid).
func (h Hold) MemoryText() string {
	if !h.MemoryMeasured() {
		return "gateway memory not measured (no --pid)"
	}
	return fmt.Sprintf("gateway RSS %.1f MiB → %.1f MiB: %.1f KiB per open stream", mib(h.RSSBefore), mib(h.RSSOpen), h.BytesPerStream/1024)
}

// ErrorList renders a count of errors by kind (the load generator's
// keys: status_502, timeout, …) for people: "none", or "status_502 ×2,
// timeout ×1", the most frequent first, ties by name.
func ErrorList[N int | int64](errs map[string]N) string {
	var kinds []string
	for k, n := range errs {
		if n != 0 {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return "none"
	}
	slices.SortFunc(kinds, func(a, b string) int {
		return cmp.Or(cmp.Compare(errs[b], errs[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s ×%d", k, errs[k])
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(a, b) })
}
