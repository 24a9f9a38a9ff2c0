package scripts

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// protectedMark is the __metatable field of every read-only table the host
// makes: getmetatable returns it, setmetatable refuses to replace such a
// metatable, and the host's rawset, table.insert, table.remove and table.sort
// refuse tables that carry it.
var protectedMark = lua.LString("protected")

// removedGlobals are base functions a policy does not get: code loading,
// environment access and the collector. print is replaced, rawset guarded.
var removedGlobals = []string{
	"dofile", "loadfile", "load", "loadstring", "require", "module",
	"getfenv", "setfenv", "collectgarbage", "newproxy", "_printregs",
	"_GOPHER_LUA_VERSION",
}

// sandbox is one Lua state with only base (trimmed), table, string and math,
// read-only library tables and the call budget installed. A sandbox is not
// safe for concurrent use: one goroutine (the scheduler actor) owns it.
type sandbox struct {
	L      *lua.LState
	budget *budget
	opts   Options
	policy string
	rnd    *rand.Rand
	roMeta *lua.LTable // metatable of the view tables: __newindex raises, __metatable protects
	nums   numbers     // boxes the numbers the host hands the state
}

// newSandbox builds a fresh sandboxed state for the named policy.
func newSandbox(policy string, opts Options) *sandbox {
	L := lua.NewState(lua.Options{
		CallStackSize:       opts.CallStackSize,
		RegistrySize:        opts.RegistrySize,
		RegistryMaxSize:     opts.RegistryMaxSize,
		RegistryGrowStep:    1024, // fewer, larger copies while the stack grows
		SkipOpenLibs:        true,
		IncludeGoStackTrace: false,
	})
	sb := &sandbox{L: L, budget: newBudget(), opts: opts, policy: policy}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	sb.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}

	G := L.G.Global
	for _, name := range removedGlobals {
		G.RawSetString(name, lua.LNil)
	}
	G.RawSetString("print", L.NewFunction(sb.print))
	G.RawSetString("rawset", L.NewFunction(guardedRawset))

	sb.roMeta = L.NewTable()
	sb.roMeta.RawSetString("__newindex", L.NewFunction(readOnlyField))
	sb.roMeta.RawSetString("__metatable", protectedMark)

	str := G.RawGetString(lua.StringLibName).(*lua.LTable)
	str.RawSetString("dump", lua.LNil)
	installStringLimits(L, str, opts.MaxStringBytes)

	tab := G.RawGetString(lua.TabLibName).(*lua.LTable)
	installTableLimits(L, tab, opts.MaxStringBytes)

	mth := G.RawGetString(lua.MathLibName).(*lua.LTable)
	mth.RawSetString("random", L.NewFunction(sb.random))
	mth.RawSetString("randomseed", lua.LNil)
	sb.installMath(mth)

	for _, name := range []string{lua.StringLibName, lua.TabLibName, lua.MathLibName} {
		G.RawSetString(name, sb.readOnlyProxy(G.RawGetString(name).(*lua.LTable)))
	}
	// str is also the metatable of every string value, and its __index was
	// str itself, so ("").__index reached the writable library: strings now
	// index through the read-only proxy, and getmetatable("") returns the mark.
	str.RawSetString("__index", G.RawGetString(lua.StringLibName))
	str.RawSetString("__metatable", protectedMark)

	L.SetContext(sb.budget)
	return sb
}

// readOnlyProxy returns an empty table that reads through to t and refuses writes.
func (sb *sandbox) readOnlyProxy(t *lua.LTable) *lua.LTable {
	L := sb.L
	mt := L.NewTable()
	mt.RawSetString("__index", t)
	mt.RawSetString("__newindex", L.NewFunction(readOnlyField))
	mt.RawSetString("__metatable", protectedMark)
	p := L.NewTable()
	p.Metatable = mt
	return p
}

// freezeGlobals makes the global table read-only: its contents move to a
// backing table it reads through, and assignments to globals raise. The
// functions a chunk defined keep the global table as their environment, so
// from now on they can read globals but not create or change them.
func (sb *sandbox) freezeGlobals() {
	L := sb.L
	G := L.G.Global
	backing := L.NewTable()
	var keys []lua.LValue
	G.ForEach(func(k, v lua.LValue) {
		backing.RawSet(k, v)
		keys = append(keys, k)
	})
	for _, k := range keys {
		G.RawSet(k, lua.LNil)
	}
	mt := L.NewTable()
	mt.RawSetString("__index", backing)
	mt.RawSetString("__newindex", L.NewFunction(readOnlyGlobal))
	mt.RawSetString("__metatable", protectedMark)
	G.Metatable = mt
}

// isProtected reports whether t is one of the host's read-only tables.
func isProtected(v lua.LValue) bool {
	t, ok := v.(*lua.LTable)
	if !ok {
		return false
	}
	mt, ok := t.Metatable.(*lua.LTable)
	return ok && mt.RawGetString("__metatable") == protectedMark
}

func readOnlyField(L *lua.LState) int {
	L.RaiseError("attempt to set field %s of a read-only table", fieldName(L.Get(2)))
	return 0
}

func readOnlyGlobal(L *lua.LState) int {
	L.RaiseError("attempt to set global %s: globals are read-only after load (use a local)", fieldName(L.Get(2)))
	return 0
}

func fieldName(k lua.LValue) string {
	if s, ok := k.(lua.LString); ok {
		return "'" + string(s) + "'"
	}
	return "[" + k.String() + "]"
}

// guardedRawset is rawset that refuses the host's read-only tables.
func guardedRawset(L *lua.LState) int {
	t := L.CheckTable(1)
	if isProtected(t) {
		L.RaiseError("rawset: table is read-only")
	}
	L.RawSet(t, L.CheckAny(2), L.CheckAny(3))
	L.SetTop(1)
	return 1
}

// print logs its arguments at debug level; it builds nothing when debug is off.
func (sb *sandbox) print(L *lua.LState) int {
	log := sb.opts.Log
	if log == nil || !log.Enabled(context.Background(), slog.LevelDebug) {
		return 0
	}
	var b strings.Builder
	for i := 1; i <= L.GetTop(); i++ {
		if i > 1 {
			b.WriteByte('\t')
		}
		b.WriteString(L.ToStringMeta(L.Get(i)).String())
	}
	log.Debug("policy print", "policy", sb.policy, "msg", b.String())
	return 0
}

// random is Lua 5.1's math.random on the sandbox's own source:
// random() in [0,1), random(m) in [1,m], random(m,n) in [m,n].
func (sb *sandbox) random(L *lua.LState) int {
	switch L.GetTop() {
	case 0:
		L.Push(lua.LNumber(sb.rnd.Float64()))
	case 1:
		m := L.CheckInt64(1)
		if m < 1 {
			L.ArgError(1, "interval is empty")
		}
		L.Push(lua.LNumber(1 + sb.rnd.Int64N(m)))
	default:
		m, n := L.CheckInt64(1), L.CheckInt64(2)
		if m > n {
			L.ArgError(2, "interval is empty")
		}
		L.Push(lua.LNumber(m + sb.rnd.Int64N(n-m+1)))
	}
	return 1
}

// close releases the state.
func (sb *sandbox) close() {
	sb.budget.timer.Stop()
	sb.L.Close()
}
