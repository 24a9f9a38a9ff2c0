package harness

import (
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/troupe-gw/troupe/bench/proc"
	"github.com/troupe-gw/troupe/bench/report"
)

// machine describes this machine from /proc (fields stay empty elsewhere).
func machine() report.Machine {
	m := report.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.MemTotalKB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return m
}

// memWatch follows the gateway's resident memory.
type memWatch struct {
	pid       int
	ok        bool
	last, max int64
}

func (w *memWatch) sample() {
	if w.pid == 0 {
		return
	}
	s, err := proc.Read(w.pid)
	if err != nil {
		return
	}
	w.ok, w.last, w.max = true, s.RSSBytes, max(w.max, s.RSSBytes)
}
