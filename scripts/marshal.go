package scripts

import (
	"math"
	"slices"
	"time"
	"unsafe"

	lua "github.com/yuin/gopher-lua"
)

// The views reach Lua as tables that a sandbox allocates once and refills
// before every call, so a score call builds no tables. They carry the
// sandbox's read-only metatable: assigning a field that has no value raises,
// and every field a policy could overwrite is rewritten by the next fill, so
// nothing a call does to a view is seen by the next call. Strings of small
// cardinality are boxed once per sandbox (interner); integers below
// len(smallInts) are boxed once per process, other numbers numberPage to an
// allocation (numbers).
//
// A refill compares each field with the value the table holds and stores
// only what differs. For a policy whose code cannot write a table at all
// (writeFree: no table assignment outside the top-level chunk; rawset,
// table.insert, table.remove and table.sort refuse the view tables), what
// the table holds is what the last fill stored, so the fill compares with
// its own record of that (the cells) instead of looking each key up in the
// table: one Go comparison instead of a hash lookup a field.

// smallInts holds the boxed integers 0..1023, shared read-only by all states.
var smallInts = func() (a [1024]lua.LValue) {
	for i := range a {
		a[i] = lua.LNumber(i)
	}
	return a
}()

// smallInt returns the shared box of f when f is one of smallInts
// (negative zero is not one of them: it stays -0 for Lua).
func smallInt(f float64) (lua.LValue, bool) {
	if f >= 0 && f < float64(len(smallInts)) && f == float64(int(f)) && (f != 0 || !math.Signbit(f)) {
		return smallInts[int(f)], true
	}
	return nil, false
}

// numberPage is how many numbers a numbers page boxes per allocation.
const numberPage = 128

// numbers boxes the numbers a sandbox's fills store, numberPage to an
// allocation instead of one each, as gopher-lua boxes the results of Lua's
// own arithmetic: a box is a float64 in the current page, and the LValue
// an interface pointing at it. A page stays alive while any of its numbers
// is referenced. Owned by the sandbox's goroutine.
type numbers struct {
	page []float64
}

// value boxes f.
func (nb *numbers) value(f float64) lua.LValue {
	if v, ok := smallInt(f); ok {
		return v
	}
	if len(nb.page) == cap(nb.page) {
		nb.page = make([]float64, 0, numberPage)
	}
	nb.page = append(nb.page, f)
	v := lua.LValue(lua.LNumber(0)) // the interface's type word, for LNumber
	(*iface)(unsafe.Pointer(&v)).data = unsafe.Pointer(&nb.page[len(nb.page)-1])
	return v
}

// iface is the layout of a non-empty interface value (runtime.iface), as
// gopher-lua's own allocator has it.
type iface struct {
	tab  unsafe.Pointer
	data unsafe.Pointer
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
	windowTabs                    []windowTable
	ntags, nwindows               int
	credits, families             *lua.LTable
	familyTabs                    []familyTable
	nfamilies                     int
	strs                          interner
	sb                            *sandbox
	want                          viewFields   // the fields each fill writes
	cur                           *AccountView // the view of the call in progress

	// trusted: the policy cannot write the tables (writeFree), so the
	// cells below are what the tables hold, and a fill compares with them.
	trusted     bool
	cells       [numViewFields]lua.LValue // t's fields as last stored
	lfCells     [6]lua.LValue             // lastFailure's, in FailureTimes order
	creditCells [3]lua.LValue             // credits' has_credits, unlimited, balance
	lastTags    []string                  // the tags tags holds (trusted only)
}

// windowTable is the reusable Lua table of one usage window and its cells
// (accountTable.trusted).
type windowTable struct {
	t     *lua.LTable
	cells [6]lua.LValue // name, used_percent, window_minutes, resets_at, burn_rate, exhausts_at
}

// cell returns c when the table's cells are trusted, else nil: the helpers
// then look the key up in the table.
func (at *accountTable) cell(c *lua.LValue) *lua.LValue {
	if at.trusted {
		return c
	}
	return nil
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

// newAccountTable makes the view table of a sandbox whose policy's source
// names the fields want; trusted says the policy cannot write tables
// (writeFree).
func newAccountTable(sb *sandbox, want viewFields, trusted bool) *accountTable {
	at := &accountTable{
		tags:        sb.readOnlyTable(),
		lastFailure: sb.readOnlyTable(),
		windows:     sb.readOnlyTable(),
		strs:        make(interner),
		sb:          sb,
		want:        want,
		trusted:     trusted,
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
	t, in, a, k, c, nb := at.t, at.strs, at.cur, accountFields[f], at.cell(&at.cells[f]), &at.sb.nums
	switch f {
	case vfID:
		setStr(t, k, a.ID, nil, c)
	case vfName:
		setStr(t, k, a.Name, nil, c)
	case vfProvider:
		setStr(t, k, a.Provider, in, c)
	case vfPlan:
		setStr(t, k, a.Plan, in, c)
	case vfGroup:
		setStr(t, k, a.Group, in, c)
	case vfPriority:
		setNum(t, k, float64(a.Priority), c, nb)
	case vfStatus:
		setStr(t, k, a.Status, in, c)
	case vfCooldownUntil:
		setTime(t, k, a.CooldownUntil, c, nb)
	case vfCooldownReason:
		setStr(t, k, a.CooldownReason, in, c)
	case vfInFlight:
		setNum(t, k, float64(a.InFlight), c, nb)
	case vfMaxInFlight:
		setNum(t, k, float64(a.MaxInFlight), c, nb)
	case vfRequests:
		setNum(t, k, float64(a.Requests), c, nb)
	case vfSuccesses:
		setNum(t, k, float64(a.Successes), c, nb)
	case vfFailures:
		setNum(t, k, float64(a.Failures), c, nb)
	case vfSuccessStreak:
		setNum(t, k, float64(a.SuccessStreak), c, nb)
	case vfFailureStreak:
		setNum(t, k, float64(a.FailureStreak), c, nb)
	case vfEWMASuccess:
		setNum(t, k, a.EWMASuccess, c, nb)
	case vfEWMALatency:
		setNum(t, k, float64(a.EWMALatency)/float64(time.Millisecond), c, nb)
	case vfEWMATTFT:
		setNum(t, k, float64(a.EWMATTFT)/float64(time.Millisecond), c, nb)
	case vfTags:
		if !at.trusted || !slices.Equal(at.lastTags, a.Tags) {
			for i, tag := range a.Tags {
				at.tags.RawSetInt(i+1, in.value(tag))
			}
			clearTail(at.tags, len(a.Tags), at.ntags)
			at.ntags = len(a.Tags)
			if at.trusted {
				at.lastTags = append(at.lastTags[:0], a.Tags...)
			}
		}
		set(t, k, at.tags, c)
	case vfLastFailure:
		lf, lfa, lc := at.lastFailure, &a.LastFailure, &at.lfCells
		setTime(lf, "quota", lfa.Quota, at.cell(&lc[0]), nb)
		setTime(lf, "rate", lfa.Rate, at.cell(&lc[1]), nb)
		setTime(lf, "auth", lfa.Auth, at.cell(&lc[2]), nb)
		setTime(lf, "banned", lfa.Banned, at.cell(&lc[3]), nb)
		setTime(lf, "transient", lfa.Transient, at.cell(&lc[4]), nb)
		setTime(lf, "timeout", lfa.Timeout, at.cell(&lc[5]), nb)
		set(t, k, lf, c)
	case vfUsageWindows:
		at.fillWindows(a)
	case vfActiveLimit:
		setStr(t, k, a.ActiveLimit, in, c)
	case vfCredits:
		if a.Credits == nil {
			set(t, k, lua.LNil, c)
			return
		}
		if at.credits == nil {
			at.credits = at.sb.readOnlyTable()
		}
		cc := &at.creditCells
		set(at.credits, "has_credits", boolValue(a.Credits.HasCredits), at.cell(&cc[0]))
		set(at.credits, "unlimited", boolValue(a.Credits.Unlimited), at.cell(&cc[1]))
		setStr(at.credits, "balance", a.Credits.Balance, in, at.cell(&cc[2]))
		set(t, k, at.credits, c)
	case vfLimitFamilies:
		at.fillFamilies(a)
	}
}

// familyTable is the reusable Lua table of one limit family, with its
// models and windows lists. Families are rare and small: their fields are
// compared with the table's, never with cells.
type familyTable struct {
	t, models, windows *lua.LTable
	windowTabs         []windowTable
	nmodels, nwindows  int
}

func (at *accountTable) fillFamilies(a *AccountView) {
	in, nb := at.strs, &at.sb.nums
	if at.families == nil {
		at.families = at.sb.readOnlyTable()
	}
	for i := range a.Families {
		f := &a.Families[i]
		if i == len(at.familyTabs) {
			at.familyTabs = append(at.familyTabs, familyTable{t: at.sb.readOnlyTable(), models: at.sb.readOnlyTable(), windows: at.sb.readOnlyTable()})
		}
		ft := &at.familyTabs[i]
		setStr(ft.t, "id", f.ID, in, nil)
		setStr(ft.t, "limit_name", f.LimitName, in, nil)
		for j, m := range f.Models {
			ft.models.RawSetInt(j+1, in.value(m))
		}
		clearTail(ft.models, len(f.Models), ft.nmodels)
		ft.nmodels = len(f.Models)
		set(ft.t, "models", ft.models, nil)
		ft.windowTabs = at.fillWindowList(ft.windows, ft.windowTabs, f.Windows, ft.nwindows, false)
		ft.nwindows = len(f.Windows)
		set(ft.t, "usage_windows", ft.windows, nil)
		setTime(ft.t, "cooling_until", f.CoolingUntil, nil, nb)
		at.families.RawSetInt(i+1, ft.t)
	}
	clearTail(at.families, len(a.Families), at.nfamilies)
	at.nfamilies = len(a.Families)
	set(at.t, accountFields[vfLimitFamilies], at.families, at.cell(&at.cells[vfLimitFamilies]))
}

func (at *accountTable) fillWindows(a *AccountView) {
	at.windowTabs = at.fillWindowList(at.windows, at.windowTabs, a.Windows, at.nwindows, at.trusted)
	at.nwindows = len(a.Windows)
	set(at.t, accountFields[vfUsageWindows], at.windows, at.cell(&at.cells[vfUsageWindows]))
}

// fillWindowList fills list with one table per window of ws (tabs are
// the reusable tables, returned grown; n is how many list held before);
// cells says whether the tables' cells are trusted.
func (at *accountTable) fillWindowList(list *lua.LTable, tabs []windowTable, ws []UsageWindow, n int, cells bool) []windowTable {
	in, nb := at.strs, &at.sb.nums
	for i := range ws {
		w := &ws[i]
		if i == len(tabs) {
			tabs = append(tabs, windowTable{t: at.sb.readOnlyTable()})
		}
		wt := &tabs[i]
		var c *[6]lua.LValue
		if cells {
			c = &wt.cells
		}
		setStr(wt.t, "name", w.Name, in, cellOf(c, 0))
		setNum(wt.t, "used_percent", w.UsedPercent, cellOf(c, 1), nb)
		setNum(wt.t, "window_minutes", float64(w.WindowMinutes), cellOf(c, 2), nb)
		setTime(wt.t, "resets_at", w.ResetsAt, cellOf(c, 3), nb)
		setNum(wt.t, "burn_rate", w.BurnRate, cellOf(c, 4), nb)
		setTime(wt.t, "exhausts_at", w.ExhaustsAt, cellOf(c, 5), nb)
		if i >= n || !cells {
			list.RawSetInt(i+1, wt.t)
		}
	}
	clearTail(list, len(ws), n)
	return tabs
}

// cellOf returns &c[i], or nil when c is nil (no trusted cells).
func cellOf(c *[6]lua.LValue, i int) *lua.LValue {
	if c == nil {
		return nil
	}
	return &c[i]
}

// set stores v under k unless k already holds v: comparing costs one map
// lookup, storing two (gopher-lua also indexes the key for next), and many
// fields repeat from one account to the next. A value a policy wrote into the
// table is replaced when it differs and kept when it is already right.
//
// c, when not nil, is the trusted cell of k (accountTable.cell): the value
// the table holds, compared instead of looking k up, and updated on a store.
func set(t *lua.LTable, k string, v lua.LValue, c *lua.LValue) {
	if c != nil {
		if *c != v {
			t.RawSetString(k, v)
			*c = v
		}
		return
	}
	if t.RawGetString(k) != v {
		t.RawSetString(k, v)
	}
}

// held is what t holds under k: the cell c when it is trusted, else the
// table's value.
func held(t *lua.LTable, k string, c *lua.LValue) lua.LValue {
	if c != nil {
		return *c
	}
	return t.RawGetString(k)
}

// store stores v under k and in the cell c, if any.
func store(t *lua.LTable, k string, v lua.LValue, c *lua.LValue) {
	t.RawSetString(k, v)
	if c != nil {
		*c = v
	}
}

// setNum is set for a number; it boxes f, through nb, only when it must be
// stored.
func setNum(t *lua.LTable, k string, f float64, c *lua.LValue, nb *numbers) {
	if cur, ok := held(t, k, c).(lua.LNumber); ok && float64(cur) == f {
		return
	}
	store(t, k, nb.value(f), c)
}

// setTime is set for a time: unix seconds, or nil for the zero time.
func setTime(t *lua.LTable, k string, tm time.Time, c *lua.LValue, nb *numbers) {
	if tm.IsZero() {
		if held(t, k, c) != lua.LNil {
			store(t, k, lua.LNil, c)
		}
		return
	}
	setNum(t, k, unixSeconds(tm), c, nb)
}

// setStr is set for a string, boxed through in (nil: boxed anew when it
// must be stored, for strings that rarely repeat, such as ids).
func setStr(t *lua.LTable, k, s string, in interner, c *lua.LValue) {
	if cur, ok := held(t, k, c).(lua.LString); ok && string(cur) == s {
		return
	}
	var v lua.LValue
	if in != nil {
		v = in.value(s)
	} else {
		v = lua.LString(s)
	}
	store(t, k, v, c)
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
	setStr(t, "model", r.Model, in, nil)
	setStr(t, "protocol", r.Protocol, in, nil)
	set(t, "stream", boolValue(r.Stream), nil)
	setStr(k, "id", r.APIKey.ID, in, nil)
	setStr(k, "name", r.APIKey.Name, in, nil)
	setStr(k, "group", r.APIKey.Group, in, nil)
	set(t, "api_key", k, nil)
	t.RawSetString("session_key", lua.LString(r.SessionKey))
	t.RawSetString("client_ip", lua.LString(r.ClientIP))
	return t
}
