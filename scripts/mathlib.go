package scripts

import (
	"math"

	lua "github.com/yuin/gopher-lua"
)

// installMath replaces math.floor, math.ceil, math.abs, math.min and
// math.max with versions that box their result without allocating when they
// can: min and max return the argument they chose as it was passed (a
// number is immutable), and floor, ceil and abs box their result through
// the sandbox's numbers (an integer below len(smallInts) from the shared
// boxes, any other number in the current page). gopher-lua's own push a
// freshly boxed float64, one allocation a call, and policies call them on
// every score (smart: 2–4 calls). Results, argument checks and errors are
// gopher-lua's: the same CheckNumber, with the same messages.
func (sb *sandbox) installMath(mth *lua.LTable) {
	L, nb := sb.L, &sb.nums
	mth.RawSetString("floor", L.NewFunction(func(L *lua.LState) int {
		L.Push(nb.value(math.Floor(float64(L.CheckNumber(1)))))
		return 1
	}))
	mth.RawSetString("ceil", L.NewFunction(func(L *lua.LState) int {
		L.Push(nb.value(math.Ceil(float64(L.CheckNumber(1)))))
		return 1
	}))
	mth.RawSetString("abs", L.NewFunction(func(L *lua.LState) int {
		L.Push(nb.value(math.Abs(float64(L.CheckNumber(1)))))
		return 1
	}))
	mth.RawSetString("min", L.NewFunction(func(L *lua.LState) int { return pickNumber(L, false, nb) }))
	mth.RawSetString("max", L.NewFunction(func(L *lua.LState) int { return pickNumber(L, true, nb) }))
}

// pickNumber is math.min (larger false) or math.max (true) as gopher-lua
// computes them — the first argument, replaced by each later one that is
// strictly smaller (larger) — returning the chosen argument itself when it
// is a number, else (a numeric string) its value.
func pickNumber(L *lua.LState, larger bool, nb *numbers) int {
	top := L.GetTop()
	if top == 0 {
		L.RaiseError("wrong number of arguments")
	}
	best, at := L.CheckNumber(1), 1
	for i := 2; i <= top; i++ {
		v := L.CheckNumber(i)
		if (larger && v > best) || (!larger && v < best) {
			best, at = v, i
		}
	}
	if v := L.Get(at); v.Type() == lua.LTNumber {
		L.Push(v) // the caller's box, not a new one
	} else {
		L.Push(nb.value(float64(best)))
	}
	return 1
}
