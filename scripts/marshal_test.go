package scripts

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// TestWriteFree: a policy whose functions assign to no table gets a view
// table whose fill trusts its cells; one that assigns to any table, even a
// table of its own, or only in a nested function, does not. The top-level
// chunk's tables (the policy table) do not count.
func TestWriteFree(t *testing.T) {
	for _, name := range Builtins() {
		want := name != "sticky" // its route returns a table it builds with a field
		if p := mustBuiltin(t, name); p.writeFree != want || p.acct.trusted != want {
			t.Errorf("builtin %s: writeFree %v, trusted %v; want %v", name, p.writeFree, p.acct.trusted, want)
		}
	}
	for src, want := range map[string]bool{
		"policy = {top_k = 2}\nlocal t = {}\nt.x = 1\nfunction score(a) return 1 end":                  true,
		"function score(a) local t = {1, 2, x = 3} return t[1] end":                                    false, // x = 3 is a SETTABLE
		"function score(a) local t = {1, 2} return t[1] end":                                           true,  // a list constructor is SETLIST
		"function score(a) a.inflight = 1 return 1 end":                                                false,
		"function score(a) local k = 'inflight' a[k] = 1 return 1 end":                                 false,
		"local function f(t) return function() t.x = 1 end end\nfunction score(a) f(a)() return 1 end": false,
		"function score(a) return 1 end\nfunction route(r) r.model = 'x' end":                          false,
	} {
		if p := mustCompile(t, "w", src); p.writeFree != want || p.acct.trusted != want {
			t.Errorf("%q: writeFree %v, trusted %v, want %v", src, p.writeFree, p.acct.trusted, want)
		}
	}
}

// TestTrustedFillMatches: for every shipped policy, a fill that trusts its
// cells leaves the view tables exactly as a fill that reads the tables back,
// and score returns the same, over a long run of varied views (fields
// appearing, changing and disappearing from one call to the next).
func TestTrustedFillMatches(t *testing.T) {
	views := append(SampleViews(testNow), benchViews(50, testNow)...)
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, name := range Builtins() {
		trusted, checked := mustBuiltin(t, name), mustBuiltin(t, name)
		trusted.acct.trusted, checked.acct.trusted = true, false // none writes the view
		// Every field, so that the tables are compared whole.
		trusted.acct.want, checked.acct.want = viewFieldsAll, viewFieldsAll
		for i := range 2000 {
			v := views[rnd.IntN(len(views))]
			if i%3 == 0 { // the same account again, a release later
				v.Successes++
				v.SuccessStreak++
				v.EWMALatency += time.Millisecond
			}
			now := testNow.Add(time.Duration(i) * time.Second)
			s1, ok1, t1, r1, e1 := trusted.Score(&v, now)
			s2, ok2, t2, r2, e2 := checked.Score(&v, now)
			if s1 != s2 || ok1 != ok2 || t1 != t2 || r1 != r2 || (e1 == nil) != (e2 == nil) {
				t.Fatalf("%s, call %d: trusted fill scored %v %v %v %v %v, checked fill %v %v %v %v %v", name, i, s1, ok1, t1, r1, e1, s2, ok2, t2, r2, e2)
			}
			if a, b := dumpTable(trusted.acct.t), dumpTable(checked.acct.t); a != b {
				t.Fatalf("%s, call %d: the view tables differ:\ntrusted %s\nchecked %s", name, i, a, b)
			}
		}
	}
}

// dumpTable renders t and the tables it holds, each table's fields sorted
// by key, so that two tables with the same contents render the same
// whatever order they were written in.
func dumpTable(t *lua.LTable) string {
	var b strings.Builder
	var dump func(t *lua.LTable, depth int)
	dump = func(t *lua.LTable, depth int) {
		if depth > 4 {
			return
		}
		var keys []string
		vals := map[string]lua.LValue{}
		t.ForEach(func(k, v lua.LValue) {
			ks := fmt.Sprintf("%v", k)
			keys = append(keys, ks)
			vals[ks] = v
		})
		slices.Sort(keys)
		b.WriteByte('{')
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=", k)
			if sub, ok := vals[k].(*lua.LTable); ok {
				dump(sub, depth+1)
			} else {
				fmt.Fprintf(&b, "%v", vals[k])
			}
			b.WriteByte(' ')
		}
		b.WriteByte('}')
	}
	dump(t, 0)
	return b.String()
}

// TestMathMatchesGopherLua: the sandbox's floor, ceil, abs, min and max
// return what gopher-lua's do, by value and type and sign of zero, and
// fail with the same messages.
func TestMathMatchesGopherLua(t *testing.T) {
	plain := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer plain.Close()
	for _, open := range []lua.LGFunction{lua.OpenBase, lua.OpenMath, lua.OpenString} {
		plain.Push(plain.NewFunction(open))
		plain.Call(0, 0)
	}
	sb := newSandbox("math", Options{}.withDefaults())
	defer sb.close()
	run := func(L *lua.LState, expr string) string {
		fn, err := L.LoadString("local v = " + expr + "\nreturn type(v) .. ':' .. tostring(v) .. ':' .. tostring(1/v)")
		if err != nil {
			return "load: " + err.Error()
		}
		L.Push(fn)
		if L == sb.L {
			sb.budget.start(1000, time.Minute)
			defer sb.budget.stop()
		}
		if err := L.PCall(0, 1, nil); err != nil {
			msg := err.Error()
			if i := strings.Index(msg, "\nstack traceback"); i >= 0 {
				msg = msg[:i]
			}
			return "error: " + msg
		}
		defer L.Pop(1)
		return L.Get(-1).String()
	}
	for _, expr := range []string{
		"math.floor(2.5)", "math.floor(-0.5)", "math.floor(1e300)", "math.floor(5000.7)", "math.floor('7.9')", "math.floor(0/0)",
		"math.ceil(-0.5)", "math.ceil(1023.5)", "math.ceil(2)",
		"math.abs(-3)", "math.abs(-0)", "math.abs(-2000.25)",
		"math.min(3, 1, 2)", "math.min(2, '1')", "math.min('3')", "math.min(-0, 0)", "math.min(0, -0)", "math.min(0/0, 1)", "math.min(1, 0/0)",
		"math.max(3, 7, 2)", "math.max(2, '9')", "math.max(5000.5, 5000)", "math.max(0, -0)",
		"math.floor()", "math.floor('x')", "math.min()", "math.min(1, nil)", "math.max({}, 1)", "math.abs(true)",
	} {
		if got, want := run(sb.L, expr), run(plain, expr); got != want {
			t.Errorf("%s: sandbox %q, gopher-lua %q", expr, got, want)
		}
	}
}

// TestNumbersBoxing: numbers boxed in pages read back right, across pages
// and after the collector ran.
func TestNumbersBoxing(t *testing.T) {
	var nb numbers
	var vs []lua.LValue
	for i := range 3 * numberPage {
		vs = append(vs, nb.value(float64(i)+0.5), nb.value(float64(-i)))
	}
	runtime.GC()
	for i := range 3 * numberPage {
		if got := vs[2*i]; got != lua.LNumber(float64(i)+0.5) {
			t.Fatalf("box %d holds %v, want %v", 2*i, got, float64(i)+0.5)
		}
		if got := vs[2*i+1]; got.(lua.LNumber) != lua.LNumber(-i) {
			t.Fatalf("box %d holds %v, want %v", 2*i+1, got, -i)
		}
	}
}
