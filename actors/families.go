package actors

import (
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// Per-model limit families (docs/codex.md#usage-limits). Beyond its own
// 5-hour and weekly windows a Codex account may have limits of its own for
// some models (x-codex-<family>-*, e.g. x-codex-bengalfox-* with
// x-codex-bengalfox-limit-name: gpt-5.2-codex-sonic). When such a limit
// runs out only that family's models rest on the account; it goes on
// serving the others.

// LimitFamily is one per-model usage limit of an account as it last
// reported it. Its slices are never mutated after publication.
type LimitFamily struct {
	ID        string // the family's header part, lower case ("bengalfox")
	LimitName string // x-codex-<family>-limit-name: the model it covers; "" when not given
	// Models are further models the backend answered under this family
	// (x-codex-active-limit naming it), at most maxFamilyModels.
	Models  []string
	Windows []UsageWindow // its windows, named like View.Windows (no burn rate)
	// CoolingUntil is when the family's models may be served again after
	// its limit ran out (the reset of its used-up window, else an hour
	// after the report); zero while it has not.
	CoolingUntil time.Time
}

// maxFamilyModels bounds LimitFamily.Models.
const maxFamilyModels = 16

// Covers reports whether model belongs to the family: it is the family's
// limit name (or a dated variant of it, "<name>-2026-…"), or one the
// backend answered under the family.
func (f *LimitFamily) Covers(model string) bool {
	if model == "" {
		return false
	}
	if f.LimitName != "" && (model == f.LimitName || strings.HasPrefix(model, f.LimitName+"-")) {
		return true
	}
	return slices.Contains(f.Models, model)
}

// ModelCooling reports whether the account rests for model at now because
// the limit family covering model ran out.
func (v *View) ModelCooling(model string, now time.Time) bool {
	for i := range v.Families {
		f := &v.Families[i]
		if now.Before(f.CoolingUntil) && f.Covers(model) {
			return true
		}
	}
	return false
}

// families folds the per-model limits of report l (an answer to a request
// for model, at at) into the view, and reports whether the backend said the
// account's own limit is reached (x-codex-limit-reached for the active
// limit "codex"). A family that is used up (a window at 100 %, or the
// backend saying so) cools until its reset; one whose report shows it
// usable again stops cooling. The family the backend applied to the request
// (x-codex-active-limit) learns model.
func (a *account) families(l upstream.RateLimits, at time.Time, model string) (ownReached bool) {
	active := ""
	if l.ActiveLimit != "" && l.ActiveLimit != "codex" {
		active = strings.TrimPrefix(l.ActiveLimit, "codex_")
	}
	reached := ""
	if l.LimitReached {
		switch {
		case l.LimitReachedFamily != "":
			reached = l.LimitReachedFamily
		case active != "":
			reached = active
		default:
			ownReached = true
		}
	}
	if len(l.Families) == 0 && active == "" && reached == "" {
		return ownReached
	}
	out := make([]LimitFamily, 0, len(a.view.Families)+len(l.Families)+1)
	out = append(out, a.view.Families...) // copies of the values; slices replaced below, never mutated
	find := func(id string) *LimitFamily {
		for i := range out {
			if out[i].ID == id {
				return &out[i]
			}
		}
		out = append(out, LimitFamily{ID: id})
		return &out[len(out)-1]
	}
	for _, rf := range l.Families {
		f := find(rf.ID)
		if rf.LimitName != "" {
			f.LimitName = rf.LimitName
		}
		ws := make([]UsageWindow, 0, len(rf.Windows))
		for _, w := range rf.Windows {
			ws = append(ws, UsageWindow{Name: w.Name, UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes, ResetsAt: w.ResetsAt})
		}
		f.Windows = ws
		switch {
		case rf.Exhausted():
			f.CoolingUntil = familyReset(rf.Windows, at)
		case !f.CoolingUntil.IsZero():
			f.CoolingUntil = time.Time{} // the report shows it usable again
		}
	}
	if active != "" && model != "" {
		f := find(active)
		if !f.Covers(model) && len(f.Models) < maxFamilyModels {
			f.Models = append(slices.Clip(f.Models), model)
		}
	}
	if reached != "" {
		f := find(reached)
		if until := familyReset(nil, at); f.CoolingUntil.Before(until) {
			f.CoolingUntil = until
		}
	}
	slices.SortFunc(out, func(x, y LimitFamily) int { return strings.Compare(x.ID, y.ID) })
	a.edit().Families = out
	return ownReached
}

// familyReset is when a used-up family may serve again: the latest reset
// of its used-up windows, else an hour after the report.
func familyReset(ws []upstream.RateWindow, at time.Time) time.Time {
	var until time.Time
	for _, w := range ws {
		if w.Exhausted() && w.ResetsAt.After(until) {
			until = w.ResetsAt
		}
	}
	if !until.After(at) {
		until = at.Add(time.Hour)
	}
	return until
}
