package scripts

import (
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The views reach Lua as tables that a sandbox allocates once and refills
// before every call, so a score call builds no tables. They carry the
// sandbox's read-only metatable: assigning a field that has no value raises,
// and every field a policy could overwrite is rewritten by the next fill, so
// nothing a call does to a view is seen by the next call. Strings of small
// cardinality are boxed once per sandbox (interner); integers below
// len(smallInts) are boxed once per process.

// smallInts holds the boxed integers 0..1023, shared read-only by all states.
var smallInts = func() (a [1024]lua.LValue) {
	for i := range a {
		a[i] = lua.LNumber(i)
	}
	return a
}()

// floatValue boxes f, without allocating for the integers of smallInts.
func floatValue(f float64) lua.LValue {
	if f >= 0 && f < float64(len(smallInts)) && f == float64(int(f)) {
		return smallInts[int(f)]
	}
	return lua.LNumber(f)
}

// unixSeconds is t as float unix seconds.
func unixSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}

func boolValue(b bool) lua.LValue {
	if b {
		return lua.LTrue
	}
	return lua.LFalse
}

var emptyString lua.LValue = lua.LString("")

// maxInterned bounds an interner; past it the map starts over.
const maxInterned = 4096

// interner boxes repeated strings (provider, status, tags, …) once.
type interner map[string]lua.LValue

func (in interner) value(s string) lua.LValue {
	if s == "" {
		return emptyString
	}
	if v, ok := in[s]; ok {
		return v
	}
	if len(in) >= maxInterned {
		clear(in)
	}
	v := lua.LValue(lua.LString(s))
	in[s] = v
	return v
}

// accountTable is the reusable Lua view of an AccountView. A fill writes
// only the fields the policy's source names (scanSource), and the table's
// __index writes any other field the moment a call reads it (a computed key)
// and adds it to the fields every later fill writes: a policy reading five
// fields does not pay for thirty, and reads every field right.
type accountTable struct {
	t, tags, lastFailure, windows *lua.LTable
	windowTabs                    []*lua.LTable
	ntags, nwindows               int
	credits, families             *lua.LTable
	familyTabs                    []familyTable
	nfamilies                     int
	strs                          interner
	sb                            *sandbox
	want                          viewFields   // the fields each fill writes
	cur                           *AccountView // the view of the call in progress
}

// viewFields is a set of the account view's top-level fields (accountFields).
type viewFields uint32

// The account view's top-level fields, by index in accountFields.
const (
	vfID = iota
	vfName
	vfProvider
	vfPlan
	vfGroup
	vfPriority
	vfStatus
	vfCooldownUntil
	vfCooldownReason
	vfInFlight
	vfMaxInFlight
	vfRequests
	vfSuccesses
	vfFailures
	vfSuccessStreak
	vfFailureStreak
	vfEWMASuccess
	vfEWMALatency
	vfEWMATTFT
	vfTags
	vfLastFailure
	vfUsageWindows
	vfActiveLimit
	vfCredits
	vfLimitFamilies
	numViewFields

	viewFieldsAll viewFields = 1<<numViewFields - 1
)

// accountFields are the Lua names of the account view's top-level fields.
var accountFields = [numViewFields]string{
	vfID: "id", vfName: "name", vfProvider: "provider", vfPlan: "plan", vfGroup: "group",
	vfPriority: "priority", vfStatus: "status", vfCooldownUntil: "cooldown_until",
	vfCooldownReason: "cooldown_reason", vfInFlight: "inflight", vfMaxInFlight: "max_inflight",
	vfRequests: "requests", vfSuccesses: "successes", vfFailures: "failures",
	vfSuccessStreak: "success_streak", vfFailureStreak: "failure_streak",
	vfEWMASuccess: "ewma_success", vfEWMALatency: "ewma_latency_ms", vfEWMATTFT: "ewma_ttft_ms",
	vfTags: "tags", vfLastFailure: "last_failure", vfUsageWindows: "usage_windows",
	vfActiveLimit: "active_limit", vfCredits: "credits", vfLimitFamilies: "limit_families",
}

func (sb *sandbox) readOnlyTable() *lua.LTable {
	t := sb.L.NewTable()
	t.Metatable = sb.roMeta
	return t
}

func newAccountTable(sb *sandbox, want viewFields) *accountTable {
	at := &accountTable{
		tags:        sb.readOnlyTable(),
		lastFailure: sb.readOnlyTable(),
		windows:     sb.readOnlyTable(),
		strs:        make(interner),
		sb:          sb,
		want:        want,
	}
	// The account table's own metatable: read-only like the others, and
	// filling what a call reads that the last fill skipped.
	meta := sb.L.NewTable()
	meta.RawSetString("__newindex", sb.roMeta.RawGetString("__newindex"))
	meta.RawSetString("__metatable", sb.roMeta.RawGetString("__metatable"))
	meta.RawSetString("__index", sb.L.NewFunction(at.index))
	at.t = sb.L.NewTable()
	at.t.Metatable = meta
	return at
}

// fill writes the wanted fields of a into the table; see the field comments
// of AccountView.
func (at *accountTable) fill(a *AccountView) *lua.LTable {
	at.cur = a
	for f := range numViewFields {
		if at.want&(1<<f) != 0 {
			at.fillField(f)
		}
	}
	return at.t
}

// index is the account table's __index: a field the last fill skipped is
// written now, and by every later fill. Other keys are nil.
func (at *accountTable) index(L *lua.LState) int {
	k, ok := L.Get(2).(lua.LString)
	if ok && at.cur != nil {
		for f, name := range accountFields {
			if name == string(k) {
				at.want |= 1 << f
				at.fillField(f)
				L.Push(at.t.RawGetString(name))
				return 1
			}
		}
	}
	L.Push(lua.LNil)
	return 1
}

// fillField writes field f of the current view.
func (at *accountTable) fillField(f int) {
	t, in, a, k := at.t, at.strs, at.cur, accountFields[f]
	switch f {
	case vfID:
		t.RawSetString(k, lua.LString(a.ID))
	case vfName:
		t.RawSetString(k, lua.LString(a.Name))
	case vfProvider:
		setStr(t, k, a.Provider, in)
	case vfPlan:
		setStr(t, k, a.Plan, in)
	case vfGroup:
		setStr(t, k, a.Group, in)
	case vfPriority:
		setNum(t, k, float64(a.Priority))
	case vfStatus:
		setStr(t, k, a.Status, in)
	case vfCooldownUntil:
		setTime(t, k, a.CooldownUntil)
	case vfCooldownReason:
		setStr(t, k, a.CooldownReason, in)
	case vfInFlight:
		setNum(t, k, float64(a.InFlight))
	case vfMaxInFlight:
		setNum(t, k, float64(a.MaxInFlight))
	case vfRequests:
		setNum(t, k, float64(a.Requests))
	case vfSuccesses:
		setNum(t, k, float64(a.Successes))
	case vfFailures:
		setNum(t, k, float64(a.Failures))
	case vfSuccessStreak:
		setNum(t, k, float64(a.SuccessStreak))
	case vfFailureStreak:
		setNum(t, k, float64(a.FailureStreak))
	case vfEWMASuccess:
		setNum(t, k, a.EWMASuccess)
	case vfEWMALatency:
		setNum(t, k, float64(a.EWMALatency)/float64(time.Millisecond))
	case vfEWMATTFT:
		setNum(t, k, float64(a.EWMATTFT)/float64(time.Millisecond))
	case vfTags:
		for i, tag := range a.Tags {
			at.tags.RawSetInt(i+1, in.value(tag))
		}
		clearTail(at.tags, len(a.Tags), at.ntags)
		at.ntags = len(a.Tags)
		set(t, k, at.tags)
	case vfLastFailure:
		lf, lfa := at.lastFailure, &a.LastFailure
		setTime(lf, "quota", lfa.Quota)
		setTime(lf, "rate", lfa.Rate)
		setTime(lf, "auth", lfa.Auth)
		setTime(lf, "banned", lfa.Banned)
		setTime(lf, "transient", lfa.Transient)
		setTime(lf, "timeout", lfa.Timeout)
		set(t, k, lf)
	case vfUsageWindows:
		at.fillWindows(a)
	case vfActiveLimit:
		setStr(t, k, a.ActiveLimit, in)
	case vfCredits:
		if a.Credits == nil {
			set(t, k, lua.LNil)
			return
		}
		if at.credits == nil {
			at.credits = at.sb.readOnlyTable()
		}
		set(at.credits, "has_credits", boolValue(a.Credits.HasCredits))
		set(at.credits, "unlimited", boolValue(a.Credits.Unlimited))
		setStr(at.credits, "balance", a.Credits.Balance, in)
		set(t, k, at.credits)
	case vfLimitFamilies:
		at.fillFamilies(a)
	}
}

// familyTable is the reusable Lua table of one limit family, with its
// models and windows lists.
type familyTable struct {
	t, models, windows *lua.LTable
	windowTabs         []*lua.LTable
	nmodels, nwindows  int
}

func (at *accountTable) fillFamilies(a *AccountView) {
	in := at.strs
	if at.families == nil {
		at.families = at.sb.readOnlyTable()
	}
	for i := range a.Families {
		f := &a.Families[i]
		if i == len(at.familyTabs) {
			at.familyTabs = append(at.familyTabs, familyTable{t: at.sb.readOnlyTable(), models: at.sb.readOnlyTable(), windows: at.sb.readOnlyTable()})
		}
		ft := &at.familyTabs[i]
		setStr(ft.t, "id", f.ID, in)
		setStr(ft.t, "limit_name", f.LimitName, in)
		for j, m := range f.Models {
			ft.models.RawSetInt(j+1, in.value(m))
		}
		clearTail(ft.models, len(f.Models), ft.nmodels)
		ft.nmodels = len(f.Models)
		set(ft.t, "models", ft.models)
		ft.windowTabs = at.fillWindowList(ft.windows, ft.windowTabs, f.Windows, ft.nwindows)
		ft.nwindows = len(f.Windows)
		set(ft.t, "usage_windows", ft.windows)
		setTime(ft.t, "cooling_until", f.CoolingUntil)
		at.families.RawSetInt(i+1, ft.t)
	}
	clearTail(at.families, len(a.Families), at.nfamilies)
	at.nfamilies = len(a.Families)
	set(at.t, accountFields[vfLimitFamilies], at.families)
}

func (at *accountTable) fillWindows(a *AccountView) {
	at.windowTabs = at.fillWindowList(at.windows, at.windowTabs, a.Windows, at.nwindows)
	at.nwindows = len(a.Windows)
	set(at.t, accountFields[vfUsageWindows], at.windows)
}

// fillWindowList fills list with one table per window of ws (tabs are
// the reusable tables, returned grown; n is how many list held before).
func (at *accountTable) fillWindowList(list *lua.LTable, tabs []*lua.LTable, ws []UsageWindow, n int) []*lua.LTable {
	in := at.strs
	for i := range ws {
		w := &ws[i]
		if i == len(tabs) {
			tabs = append(tabs, at.sb.readOnlyTable())
		}
		wt := tabs[i]
		setStr(wt, "name", w.Name, in)
		setNum(wt, "used_percent", w.UsedPercent)
		setNum(wt, "window_minutes", float64(w.WindowMinutes))
		setTime(wt, "resets_at", w.ResetsAt)
		setNum(wt, "burn_rate", w.BurnRate)
		setTime(wt, "exhausts_at", w.ExhaustsAt)
		list.RawSetInt(i+1, wt)
	}
	clearTail(list, len(ws), n)
	return tabs
}

// set stores v under k unless k already holds v: comparing costs one map
// lookup, storing two (gopher-lua also indexes the key for next), and many
// fields repeat from one account to the next. A value a policy wrote into the
// table is replaced when it differs and kept when it is already right.
func set(t *lua.LTable, k string, v lua.LValue) {
	if t.RawGetString(k) != v {
		t.RawSetString(k, v)
	}
}

// setNum is set for a number; it boxes f only when it must be stored.
func setNum(t *lua.LTable, k string, f float64) {
	if cur, ok := t.RawGetString(k).(lua.LNumber); ok && float64(cur) == f {
		return
	}
	t.RawSetString(k, floatValue(f))
}

// setTime is set for a time: unix seconds, or nil for the zero time.
func setTime(t *lua.LTable, k string, tm time.Time) {
	if tm.IsZero() {
		if t.RawGetString(k) != lua.LNil {
			t.RawSetString(k, lua.LNil)
		}
		return
	}
	setNum(t, k, unixSeconds(tm))
}

// setStr is set for a string, boxed through in.
func setStr(t *lua.LTable, k, s string, in interner) {
	if cur, ok := t.RawGetString(k).(lua.LString); ok && string(cur) == s {
		return
	}
	t.RawSetString(k, in.value(s))
}

// clearTail removes list elements n+1..prev left from an earlier fill.
func clearTail(t *lua.LTable, n, prev int) {
	for i := prev; i > n; i-- {
		t.RawSetInt(i, lua.LNil)
	}
}

// requestTable is the reusable Lua view of a RequestView.
type requestTable struct {
	t, apiKey *lua.LTable
	strs      interner
}

func newRequestTable(sb *sandbox) *requestTable {
	return &requestTable{t: sb.readOnlyTable(), apiKey: sb.readOnlyTable(), strs: make(interner)}
}

// fill writes r into the table; see the field comments of RequestView.
func (rt *requestTable) fill(r *RequestView) *lua.LTable {
	t, k, in := rt.t, rt.apiKey, rt.strs
	setStr(t, "model", r.Model, in)
	setStr(t, "protocol", r.Protocol, in)
	set(t, "stream", boolValue(r.Stream))
	setStr(k, "id", r.APIKey.ID, in)
	setStr(k, "name", r.APIKey.Name, in)
	setStr(k, "group", r.APIKey.Group, in)
	set(t, "api_key", k)
	t.RawSetString("session_key", lua.LString(r.SessionKey))
	t.RawSetString("client_ip", lua.LString(r.ClientIP))
	return t
}
