package admin

import (
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/actors"
)

// OpsUsageWindows is the usage-window part of GET /api/admin/ops: per
// window name ("5h", "7d", …) a summary over the accounts reporting it, and
// the accounts whose windows are forecast to run out first.
type OpsUsageWindows struct {
	ByName     map[string]OpsWindowGroup `json:"by_name"`
	Exhausting []OpsWindowAccount        `json:"exhausting_first"` // up to 20, soonest exhausts_at first
}

// OpsWindowGroup summarizes one window over the accounts that report it.
type OpsWindowGroup struct {
	Accounts        int        `json:"accounts"`
	Exhausted       int        `json:"exhausted"`         // at 100 % or more
	MeanUsedPercent float64    `json:"mean_used_percent"` // over Accounts
	SoonestReset    *time.Time `json:"soonest_reset,omitempty"`
}

// OpsWindowAccount is one account's window with its forecast.
type OpsWindowAccount struct {
	Name        string     `json:"name"`
	Window      string     `json:"window"`
	UsedPercent float64    `json:"used_percent"`
	BurnRate    float64    `json:"burn_rate"` // percent per hour
	ExhaustsAt  time.Time  `json:"exhausts_at"`
	ResetsAt    *time.Time `json:"resets_at,omitempty"`
}

func usageWindowsOps(views []actors.View, now time.Time) OpsUsageWindows {
	out := OpsUsageWindows{ByName: map[string]OpsWindowGroup{}, Exhausting: []OpsWindowAccount{}}
	for i := range views {
		v := &views[i]
		for _, w := range v.Windows {
			g := out.ByName[w.Name]
			g.Accounts++
			g.MeanUsedPercent += (w.UsedPercent - g.MeanUsedPercent) / float64(g.Accounts)
			if w.UsedPercent >= 100 {
				g.Exhausted++
			}
			if !w.ResetsAt.IsZero() && w.ResetsAt.After(now) && (g.SoonestReset == nil || w.ResetsAt.Before(*g.SoonestReset)) {
				t := w.ResetsAt.UTC()
				g.SoonestReset = &t
			}
			out.ByName[w.Name] = g
			if !w.ExhaustsAt.IsZero() && w.UsedPercent < 100 {
				a := OpsWindowAccount{Name: v.Name, Window: w.Name, UsedPercent: w.UsedPercent, BurnRate: w.BurnRate, ExhaustsAt: w.ExhaustsAt.UTC()}
				if !w.ResetsAt.IsZero() {
					t := w.ResetsAt.UTC()
					a.ResetsAt = &t
				}
				out.Exhausting = append(out.Exhausting, a)
			}
		}
	}
	slices.SortFunc(out.Exhausting, func(a, b OpsWindowAccount) int {
		if c := a.ExhaustsAt.Compare(b.ExhaustsAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	out.Exhausting = out.Exhausting[:min(len(out.Exhausting), 20)]
	return out
}
