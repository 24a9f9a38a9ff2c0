package scripts

import (
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Library functions run as Go code, which the call budget cannot interrupt,
// so each one that can build a large string or run long on its own is checked
// before it runs:
//   - string.rep, string.format, string.gsub and table.concat refuse results
//     larger than Options.MaxStringBytes (gsub counts what a function or table
//     replacement returns as it goes);
//   - string.gsub also refuses when (matches × result length), the bytes its
//     quadratic implementation copies, could exceed maxCopyWork;
//   - pattern functions (find, match, gmatch, gsub) refuse a subject longer than
//     maxPatternSubject when the pattern has a repetition, and any call whose
//     worst-case backtracking, (len+1)^(repetitions+1) (one less when anchored
//     with ^), exceeds maxPatternWork steps.
const (
	maxPatternSubject = 64 << 10
	maxPatternWork    = 1e8
	maxCopyWork       = 1e8
)

// installStringLimits wraps the string library's unbounded functions.
func installStringLimits(L *lua.LState, str *lua.LTable, maxBytes int) {
	wrap(L, str, "rep", func(L *lua.LState) {
		s, n := L.CheckString(1), L.CheckInt(2)
		if n > 0 && float64(len(s))*float64(n) > float64(maxBytes) {
			L.RaiseError("string.rep: result of %.0f bytes is over the %d-byte limit", float64(len(s))*float64(n), maxBytes)
		}
	})
	wrap(L, str, "format", func(L *lua.LState) {
		if n := formatSize(L); n > float64(maxBytes) {
			L.RaiseError("string.format: result of up to %.0f bytes is over the %d-byte limit", n, maxBytes)
		}
	})
	for _, name := range []string{"find", "match"} {
		wrap(L, str, name, func(L *lua.LState) {
			if name == "find" && L.GetTop() >= 4 && lua.LVAsBool(L.Get(4)) {
				return // plain find: linear
			}
			checkPattern(L, "string."+name, L.CheckString(1), L.CheckString(2))
		})
	}
	for _, name := range []string{"gmatch", "gfind"} {
		wrap(L, str, name, func(L *lua.LState) {
			checkPattern(L, "string."+name, L.CheckString(1), L.CheckString(2))
		})
	}
	wrap(L, str, "gsub", func(L *lua.LState) { checkGsub(L, maxBytes) })
}

// installTableLimits bounds table.concat and keeps table.insert, table.remove
// and table.sort off the host's read-only tables (they write with rawset).
func installTableLimits(L *lua.LState, tab *lua.LTable, maxBytes int) {
	wrap(L, tab, "concat", func(L *lua.LState) {
		t := L.CheckTable(1)
		sep := L.OptString(2, "")
		i, j := L.OptInt(3, 1), L.OptInt(4, t.Len())
		i, j = max(i, 1), min(j, t.Len())
		var n float64
		for k := i; k <= j; k++ {
			switch v := t.RawGetInt(k).(type) {
			case lua.LString:
				n += float64(len(v))
			case lua.LNumber:
				n += 24
			}
			if k < j {
				n += float64(len(sep))
			}
			if n > float64(maxBytes) {
				L.RaiseError("table.concat: result is over the %d-byte limit", maxBytes)
			}
		}
	})
	for _, name := range []string{"insert", "remove", "sort"} {
		wrap(L, tab, name, func(L *lua.LState) {
			if isProtected(L.Get(1)) {
				L.RaiseError("table.%s: table is read-only", name)
			}
		})
	}
}

// wrap replaces lib[name] with a function that runs check, which raises to
// refuse, and then the original.
func wrap(L *lua.LState, lib *lua.LTable, name string, check func(*lua.LState)) {
	orig, ok := lib.RawGetString(name).(*lua.LFunction)
	if !ok {
		return
	}
	if len(orig.Upvalues) == 0 && orig.IsG {
		g := orig.GFunction
		lib.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
			check(L)
			return g(L)
		}))
		return
	}
	lib.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
		check(L)
		top := L.GetTop()
		L.Push(orig)
		for i := 1; i <= top; i++ {
			L.Push(L.Get(i))
		}
		L.Call(top, lua.MultRet)
		return L.GetTop() - top
	}))
}

// patternShape counts the repetitions (*, +, -) of a Lua pattern outside
// sets and escapes, and reports whether it is anchored with ^.
func patternShape(pat string) (reps int, anchored bool) {
	anchored = strings.HasPrefix(pat, "^")
	for i := 0; i < len(pat); i++ {
		switch pat[i] {
		case '%':
			if i+1 < len(pat) && pat[i+1] == 'b' {
				i += 3 // %bxy
			} else {
				i++
			}
		case '[':
			i++
			if i < len(pat) && pat[i] == '^' {
				i++
			}
			if i < len(pat) && pat[i] == ']' {
				i++
			}
			for i < len(pat) && pat[i] != ']' {
				if pat[i] == '%' {
					i++
				}
				i++
			}
		case '*', '+', '-':
			if i > 0 {
				reps++
			}
		}
	}
	return reps, anchored
}

// patternWork is the worst-case backtracking of matching pat against a subject of n bytes.
func patternWork(n int, pat string) (float64, int) {
	reps, anchored := patternShape(pat)
	exp := float64(reps)
	if !anchored {
		exp++
	}
	return math.Pow(float64(n)+1, exp), reps
}

func checkPattern(L *lua.LState, fn, s, pat string) {
	work, reps := patternWork(len(s), pat)
	if reps > 0 && len(s) > maxPatternSubject {
		L.RaiseError("%s: subject of %d bytes is over the %d-byte limit for patterns with repetitions", fn, len(s), maxPatternSubject)
	}
	if work > maxPatternWork {
		L.RaiseError("%s: pattern %q is too expensive for a subject of %d bytes (anchor it with ^ or simplify it)", fn, pat, len(s))
	}
}

// checkGsub bounds string.gsub's result and the work of building it. A
// function or table replacement is wrapped to count what it returns.
func checkGsub(L *lua.LState, maxBytes int) {
	s, pat := L.CheckString(1), L.CheckString(2)
	checkPattern(L, "string.gsub", s, pat)
	matches := float64(len(s) + 1)
	if L.GetTop() >= 4 {
		if n := L.OptInt(4, -1); n >= 0 {
			matches = min(matches, float64(n))
		}
	}
	limit := float64(maxBytes)
	switch repl := L.Get(3).(type) {
	case lua.LString:
		per := float64(len(repl)) + float64(strings.Count(string(repl), "%"))*float64(len(s))
		size := float64(len(s)) + matches*per
		if size > limit {
			L.RaiseError("string.gsub: result of up to %.0f bytes is over the %d-byte limit", size, maxBytes)
		}
		if matches*size > maxCopyWork {
			L.RaiseError("string.gsub: %d-byte subject is too large for %.0f replacements", len(s), matches)
		}
	case *lua.LTable, *lua.LFunction:
		if matches*float64(len(s)) > maxCopyWork {
			L.RaiseError("string.gsub: %d-byte subject is too large for %.0f replacements", len(s), matches)
		}
		size := float64(len(s))
		L.Replace(3, L.NewFunction(func(L *lua.LState) int {
			var v lua.LValue
			if fn, ok := repl.(*lua.LFunction); ok {
				top := L.GetTop()
				L.Push(fn)
				for i := 1; i <= top; i++ {
					L.Push(L.Get(i))
				}
				L.Call(top, 1)
				v = L.Get(-1)
			} else {
				v = L.GetTable(repl, L.Get(1))
			}
			switch r := v.(type) {
			case lua.LString:
				size += float64(len(r))
			case lua.LNumber:
				size += 24
			}
			if size > limit || matches*size > maxCopyWork {
				L.RaiseError("string.gsub: result is over the %d-byte limit", maxBytes)
			}
			L.Push(v)
			return 1
		}))
	}
}

// formatSize bounds the length of string.format's result: the format, every
// width and precision, every string argument and 24 bytes per other argument.
func formatSize(L *lua.LState) float64 {
	f := L.CheckString(1)
	n := float64(len(f))
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			i++
		}
		w := 0
		for i < len(f) && f[i] >= '0' && f[i] <= '9' {
			w = min(w*10+int(f[i]-'0'), 1<<30)
			i++
		}
		if i < len(f) && f[i] == '.' {
			i++
			p := 0
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				p = min(p*10+int(f[i]-'0'), 1<<30)
				i++
			}
			w += p
		}
		n += float64(w)
	}
	for i := 2; i <= L.GetTop(); i++ {
		if s, ok := L.Get(i).(lua.LString); ok {
			n += float64(len(s))
		} else {
			n += 24
		}
	}
	return n
}
