package scripts

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freshView is an account smart scores 100, healthy.
func freshView() AccountView {
	return AccountView{ID: "a1", Name: "a1", Provider: "codex", Status: "active", MaxInFlight: 4, EWMASuccess: 1}
}

// assertServing checks that the host still serves the good policy, and that
// it still works.
func assertServing(t *testing.T, h *Host, good *Policy) {
	t.Helper()
	if h.Active() != good {
		t.Fatalf("active policy changed to %v", h.Active().Name())
	}
	v := freshView()
	s, ok, tier, _, err := h.Active().Score(&v, testNow)
	if err != nil || !ok || s != 100 || tier != TierHealthy {
		t.Fatalf("serving policy scores a fresh account %v %v %v %v, want 100 true healthy <nil>", s, ok, tier, err)
	}
}

// TestSandboxRefusals loads policies that try to escape the sandbox, exhaust
// it or break the contract. Each load must fail with the expected error kind
// and message, and the last good policy must keep serving.
func TestSandboxRefusals(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "escaped")
	cases := []struct {
		name string
		src  string
		kind error
		msg  string // substring of the error
		line int    // expected line, 0 to skip the check
	}{
		// Host access.
		{"os.execute at load", "os.execute('touch " + marker + "')", ErrRuntime, "attempt to index a non-table object(nil) with key 'execute'", 1},
		{"os.execute in score", "function score(a, now)\n  os.execute('touch " + marker + "')\n  return 1\nend", ErrRuntime, "with key 'execute'", 2},
		{"io.open", "function score(a, now)\n  local f = io.open('" + marker + "', 'w')\n  return 1\nend", ErrRuntime, "with key 'open'", 2},
		{"require", "local os = require('os')\nfunction score() return 1 end", ErrRuntime, "attempt to call a non-function object", 1},
		{"load", "function score()\n  return load('return 1')()\nend", ErrRuntime, "attempt to call a non-function object", 2},
		{"loadstring", "function score()\n  return loadstring('return 1')()\nend", ErrRuntime, "attempt to call a non-function object", 2},
		{"dofile", "dofile('/etc/passwd')\nfunction score() return 1 end", ErrRuntime, "attempt to call a non-function object", 1},
		{"loadfile", "local f = loadfile('/etc/passwd')\nfunction score() return 1 end", ErrRuntime, "attempt to call a non-function object", 1},
		{"getfenv", "local env = getfenv(1)\nfunction score() return 1 end", ErrRuntime, "attempt to call a non-function object", 1},
		{"setfenv", "function score()\n  setfenv(1, {})\n  return 1\nend", ErrRuntime, "attempt to call a non-function object", 2},
		{"debug", "function score()\n  return debug.getinfo(1)\nend", ErrRuntime, "with key 'getinfo'", 2},
		{"coroutine", "function score()\n  local co = coroutine.create(function() end)\n  return 1\nend", ErrRuntime, "with key 'create'", 2},
		{"package", "package.path = '/tmp/?.lua'\nfunction score() return 1 end", ErrRuntime, "with key 'path'", 1},
		{"collectgarbage", "collectgarbage('stop')\nfunction score() return 1 end", ErrRuntime, "attempt to call a non-function object", 1},
		{"string.dump", "function score()\n  return #string.dump(score)\nend", ErrRuntime, "attempt to call a non-function object", 2},
		{"math.randomseed", "math.randomseed(42)\nfunction score() return 1 end", ErrRuntime, "attempt to call a non-function object", 1},
		{"string metatable", "(''):rep(1).__index.rep = nil\nfunction score() return 1 end", ErrRuntime, "attempt to set field 'rep' of a read-only table", 1},
		{"getmetatable of a string", "getmetatable('').rep = nil\nfunction score() return 1 end", ErrRuntime, "attempt to index a non-table object(string) with key 'rep'", 1},

		// Memory bombs.
		{"string.rep bomb", "function score()\n  local s = string.rep('x', 1e9)\n  return #s\nend", ErrRuntime, "string.rep: result of 1000000000 bytes is over the 1048576-byte limit", 2},
		{"string.rep method bomb", "local big = ('xy'):rep(2^30)\nfunction score() return 1 end", ErrRuntime, "string.rep: result of", 1},
		{"string.rep nested bomb", "local s = string.rep('x', 2^20)\nlocal t = string.rep(s, 4)\nfunction score() return 1 end", ErrRuntime, "over the 1048576-byte limit", 2},
		{"table.concat bomb", "local s, t = string.rep('x', 2^20), {}\nfor i = 1, 100 do t[i] = s end\nlocal u = table.concat(t)\nfunction score() return 1 end", ErrRuntime, "table.concat: result is over the 1048576-byte limit", 3},
		{"string.format bomb", "local f = string.rep('%99999d', 100)\nlocal t = {}\nfor i = 1, 100 do t[i] = i end\nlocal s = string.format(f, unpack(t))\nfunction score() return 1 end", ErrRuntime, "string.format: result of up to", 4},
		{"string.gsub bomb", "local s = string.rep('a', 10000)\nlocal r = s:gsub('a', string.rep('b', 1000))\nfunction score() return 1 end", ErrRuntime, "string.gsub: result of up to", 2},
		{"string.gsub function bomb", "local big = string.rep('b', 2^20)\nlocal r = ('abc'):gsub('%w', function() return big end)\nfunction score() return 1 end", ErrRuntime, "string.gsub: result is over the 1048576-byte limit", 2},
		{"pattern backtracking", "function score()\n  return string.rep('a', 5000):find('.-.-.-.-b') or 0\nend", ErrRuntime, "is too expensive for a subject of 5000 bytes", 2},
		{"concatenation of many values", "function score()\n  local s = string.rep('x', 2^20)\n  local t = s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s\n  return #t\nend", ErrSyntax, "one expression concatenates 17 values, over the limit of 16", 3},
		{"concatenation doubling at load", "local s = 'x'\nfor i = 1, 40 do s = s .. s end\nfunction score() return 1 end", ErrBudget, "allocated more than 16 MiB", 2},
		{"concatenation doubling in score", "function score()\n  local s = 'x'\n  for i = 1, 40 do s = s .. s end\n  return #s\nend", ErrBudget, "allocated more than 16 MiB", 3},
		{"table growth", "local t = {}\nfor i = 1, 1e9 do t[i] = i end\nfunction score() return 1 end", ErrBudget, "the top-level chunk stopped", 2},
		{"registry overflow", "local t = {}\nfor i = 1, 100000 do t[i] = i end\nfunction score()\n  return select('#', unpack(t))\nend", ErrRuntime, "registry overflow", 0},

		// Runaway code.
		{"infinite loop at load", "while true do end", ErrBudget, "the top-level chunk stopped", 1},
		{"infinite loop in score", "function score(a, now)\n  while true do end\nend", ErrBudget, "score stopped: more than 200000 instructions", 2},
		{"infinite loop in route", "function score() return 1 end\nfunction route(r)\n  while true do end\nend", ErrBudget, "route stopped: more than 200000 instructions", 3},
		{"loop escaping through pcall", "function score()\n  while true do\n    pcall(function() while true do end end)\n  end\nend", ErrBudget, "score stopped", 0},
		{"tail-call loop", "local function f() return f() end\nfunction score() return f() end", ErrBudget, "score stopped", 1},
		{"deep recursion", "local function f(n) return f(n + 1) + 1 end\nfunction score()\n  return f(1)\nend", ErrRuntime, "stack overflow", 1},
		{"sort with a runaway comparator", "function score()\n  local t = {3, 2, 1}\n  table.sort(t, function(a, b) while true do end end)\n  return 1\nend", ErrBudget, "score stopped", 0},

		// Runtime errors.
		{"nil call", "function score(a, now)\n  local x = nil\n  return x()\nend", ErrRuntime, "attempt to call a non-function object", 3},
		{"nil index", "function score(a, now)\n  return a.nope.x\nend", ErrRuntime, "attempt to index a non-table object(nil) with key 'x'", 2},
		{"error()", "function score(a, now)\n  error('boom')\nend", ErrRuntime, "boom", 2},
		{"huge error message", "function score(a, now)\n  error(string.rep('E', 1e6))\nend", ErrRuntime, "… (1000000 bytes in all)", 2},
		{"error(table)", "function score(a, now)\n  error({code = 1})\nend", ErrRuntime, "error object is a table", 0},
		{"arithmetic on nil", "function score(a, now)\n  return a.cooldown_until + 1\nend", ErrRuntime, "cannot perform add operation", 2},
		{"syntax error", "function score(a)\n  return 1 +\nend", ErrSyntax, "near 'end'", 3},
		{"syntax error at eof", "function score(a)\n  return 1", ErrSyntax, "at end of file", 2},
		// At the end of the file: the last line that is not blank, where
		// the missing end belongs (issue 18: the editor marked line 1).
		{"syntax error at eof after blank lines", "policy = {}\nfunction score(a)\n  return 1\n\n  \n", ErrSyntax, "at end of file", 3},
		{"unterminated string at eof", "x = 1\ny = 'abc", ErrSyntax, "unterminated string at end of file", 2},

		// Wrong results.
		{"score returns a string", "function score() return 'high' end", ErrResult, "score returned a string, want a number, nil or false", 1},
		{"score returns true", "function score() return true end", ErrResult, "score returned true", 1},
		{"score returns a table", "function score() return {} end", ErrResult, "score returned a table", 1},
		{"score returns NaN", "function score() return 0/0 end", ErrResult, "want a finite number", 1},
		{"score returns inf", "function score() return 1/0 end", ErrResult, "want a finite number", 1},
		{"unknown tier", "function score() return 1, 'gold' end", ErrResult, `score returned tier "gold"`, 1},
		{"tier not a string", "function score() return 1, 2 end", ErrResult, "as tier", 1},
		{"negative recheck", "\n\nfunction score() return 1, nil, -5 end", ErrResult, "recheck_after -5", 3},
		{"recheck not a number", "function score() return 1, nil, '5' end", ErrResult, "as recheck_after", 1},
		{"route returns a number", "function score() return 1 end\nfunction route(r) return 5 end", ErrResult, "route returned a number", 2},
		{"route misspelt field", "function score() return 1 end\nfunction route(r) return { grup = 'x' } end", ErrResult, "unknown field 'grup'", 2},
		{"route bad tags", "function score() return 1 end\nfunction route(r) return { tags = 'eu' } end", ErrResult, "tags is a string", 2},
		{"route bad max_attempts", "function score() return 1 end\nfunction route(r) return { max_attempts = 0 } end", ErrResult, "max_attempts is 0", 2},
		{"excludes everything", "function score() return nil end", ErrResult, "score excluded all 3 active accounts", 1},

		// Writes that must not leak.
		{"global assignment in score", "function score(a)\n  counter = (counter or 0) + 1\n  return 1\nend", ErrRuntime, "attempt to set global 'counter'", 2},
		{"overwrite a global in score", "helper = 1\nfunction score(a)\n  helper = 2\n  return 1\nend", ErrRuntime, "attempt to set global 'helper'", 3},
		{"new view field", "function score(a)\n  a.bonus = 5\n  return 1\nend", ErrRuntime, "attempt to set field 'bonus' of a read-only table", 2},
		{"nil view field", "function score(a)\n  a.cooldown_until = 5\n  return 1\nend", ErrRuntime, "attempt to set field 'cooldown_until'", 2},
		{"rawset on view", "function score(a)\n  rawset(a, 'bonus', 5)\n  return 1\nend", ErrRuntime, "rawset: table is read-only", 2},
		{"table.insert on tags", "function score(a)\n  table.insert(a.tags, 'x')\n  return 1\nend", ErrRuntime, "table.insert: table is read-only", 2},
		{"setmetatable on view", "function score(a)\n  setmetatable(a, nil)\n  return 1\nend", ErrRuntime, "cannot change a protected metatable", 2},
		{"library write", "function score(a)\n  math.floor = nil\n  return 1\nend", ErrRuntime, "attempt to set field 'floor' of a read-only table", 2},

		// Definition errors.
		{"no score", "policy = {}", ErrKnobs, "no score function", 0},
		{"score not a function", "score = 5", ErrKnobs, "no score function", 0},
		{"route not a function", "function score() return 1 end\nroute = 'sticky'", ErrKnobs, "route is a string", 0},
		{"misspelt knob", "policy = { jiter = 0.1 }\nfunction score() return 1 end", ErrKnobs, `unknown knob "jiter"`, 1},
		{"bad knobs, the first by name", "policy = {\n  zeta = 1,\n  top_k = -5,\n  attempts = 2,\n}\nfunction score() return 1 end", ErrKnobs, `unknown knob "attempts"`, 4},
		{"bad top_k", "policy = { top_k = 0 }\nfunction score() return 1 end", ErrKnobs, "policy.top_k", 0},
		{"bad jitter", "policy = { jitter = 1.5 }\nfunction score() return 1 end", ErrKnobs, "policy.jitter", 0},
		{"bad score_band", "policy = { score_band = -1 }\nfunction score() return 1 end", ErrKnobs, "policy.score_band", 0},
		{"score_band not a number", "policy = { score_band = \"10\" }\nfunction score() return 1 end", ErrKnobs, "policy.score_band", 0},
		{"bad tie_break", "policy = { tie_break = { 'fastest' } }\nfunction score() return 1 end", ErrKnobs, `unknown rule "fastest"`, 0},
		{"bad concurrency tier", "policy = { concurrency = { great = 'max' } }\nfunction score() return 1 end", ErrKnobs, "unknown tier great", 0},
		{"bad concurrency share", "policy = { concurrency = { warm = 'half' } }\nfunction score() return 1 end", ErrKnobs, "policy.concurrency.warm", 0},
	}

	sample := []AccountView{freshView(), freshView(), freshView()}
	// Long wall-clock backstops, so that the instruction budgets stop the
	// runaway cases on any machine (the race detector runs Lua ~10x slower);
	// TestBudgetWallClock covers the backstop.
	opts := Options{Seed: 1, ScoreTimeout: 10 * time.Second, RouteTimeout: 10 * time.Second, LoadTimeout: 10 * time.Second}
	h := NewHost(HostOptions{Options: opts, Sample: func() []AccountView { return sample }})
	good, err := h.LoadBuiltin("smart")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := h.Load("bad", c.src)
			if err == nil {
				if _, err := h.LoadBuiltin("smart"); err != nil { // keep later cases independent
					t.Fatal(err)
				}
				good = h.Active()
				t.Fatalf("Load succeeded (%v), want an error", p.Name())
			}
			if !errors.Is(err, c.kind) {
				t.Errorf("error %q is not %v", err, c.kind)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not contain %q", err, c.msg)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %q carries no *Error", err)
			}
			if c.line != 0 && pe.Line != c.line {
				t.Errorf("error %q: line %d, want %d", err, pe.Line, c.line)
			}
			if pe.Line > 0 && !strings.Contains(err.Error(), "policy bad:"+strconv.Itoa(pe.Line)+":") {
				t.Errorf("error %q does not name its line as policy bad:%d:", err, pe.Line)
			}
			st := h.Status()
			if st.OK || st.Error != err.Error() || st.Line != pe.Line || st.Active != "smart" || st.Version != good.Version() {
				t.Errorf("status after the failed load = %+v", st)
			}
			assertServing(t, h, good)
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a policy created a file")
	}
}

// TestContained: policies that abuse the VM in ways the sandbox contains
// without refusing them load and score normally.
func TestContained(t *testing.T) {
	for name, src := range map[string]string{
		"recursion caught by pcall": "local function f(n) return select(2, pcall(f, n + 1)) end\nfunction score()\n  f(1)\n  return 1\nend",
		"error caught by pcall":     "function score()\n  local ok = pcall(error, 'x')\n  return ok and 0 or 1\nend",
		"string methods":            "function score(a)\n  return (('weight:5'):match('^weight:(%d+)$') + #('x'):rep(3))\nend",
	} {
		t.Run(name, func(t *testing.T) {
			p := mustCompile(t, "ok", src)
			if err := SelfTest(p, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSelfTestBudget: a score that is fine on one account but too slow over
// a pool sample is refused, and the last good policy keeps serving.
func TestSelfTestBudget(t *testing.T) {
	// The good policy self-tests over a small sample, so a loaded machine
	// under -race cannot push it past the wall-clock budget; the slow one
	// over the full sample, far past it on any machine.
	sample := benchViews(10, testNow)
	opts := Options{SelfTestBudget: 500 * time.Millisecond, ScoreTimeout: 10 * time.Second, LoadTimeout: 10 * time.Second}
	h := NewHost(HostOptions{Options: opts, Sample: func() []AccountView { return sample }})
	good, err := h.LoadBuiltin("smart")
	if err != nil {
		t.Fatal(err)
	}
	sample = benchViews(1000, testNow)
	// ~180,000 instructions a call: within the per-call budget, but about
	// 1,000 times smart's cost.
	slow := "function score(a, now)\n  local s = 0\n  for i = 1, 60000 do s = s + i end\n  return 1\nend"
	_, err = h.Load("slow", slow)
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "self-test ran over its 500ms budget") {
		t.Fatalf("Load(slow) = %v, want the self-test budget error", err)
	}
	assertServing(t, h, good)
}

// TestViewWritesDoNotLeak: writes to existing view fields are allowed during
// a call but never reach the next call.
func TestViewWritesDoNotLeak(t *testing.T) {
	p := mustCompile(t, "leak", `
function score(a, now)
  local seen = a.inflight
  a.inflight = 1000          -- an existing field: allowed, overwritten by the next fill
  a.tags[1] = "mutated"
  a.last_failure.rate = nil  -- removing a field is a write too
  a.usage_windows[1].used_percent = 1
  return seen + #a.tags * 1000 + (a.last_failure.auth and 1e6 or 0), nil, a.usage_windows[1].window_minutes
end`)
	v := freshView()
	v.InFlight = 2
	v.Tags = []string{"x"}
	v.LastFailure.Auth = testNow.Add(-time.Minute)
	v.LastFailure.Rate = testNow.Add(-time.Minute)
	v.Windows = []UsageWindow{{Name: "5h", UsedPercent: 50, WindowMinutes: 300}}
	for i := range 3 {
		s, ok, _, recheck, err := p.Score(&v, testNow)
		if err != nil || !ok || s != 1e6+1000+2 || recheck != 300*time.Second {
			t.Fatalf("call %d: score %v %v %v %v, want 1001002 true 5m0s", i, s, ok, recheck, err)
		}
	}
	// A smaller view after a larger one: no stale tags or windows remain.
	p2 := mustCompile(t, "count", `function score(a) return #a.tags * 10 + #a.usage_windows end`)
	v.Tags = []string{"a", "b", "c"}
	v.Windows = make([]UsageWindow, 4)
	if s, _, _, _, _ := p2.Score(&v, testNow); s != 34 {
		t.Fatalf("score = %v, want 34", s)
	}
	v.Tags, v.Windows = v.Tags[:1], nil
	if s, _, _, _, _ := p2.Score(&v, testNow); s != 10 {
		t.Fatalf("score after shrinking = %v, want 10", s)
	}
}

// TestRuntimeErrorsAreCounted: a score error is returned, never a panic,
// with ok=false and ErrorRecheck, and counted in Stats; the state keeps
// working afterwards.
func TestRuntimeErrorsAreCounted(t *testing.T) {
	p := mustCompile(t, "picky", `
function score(a, now)
  if a.name == "bad" then error("bad account") end
  if a.name == "slow" then while true do end end
  return 1
end`)
	v := freshView()
	for _, name := range []string{"bad", "slow", "ok", "bad", "ok"} {
		v.Name = name
		s, ok, _, recheck, err := p.Score(&v, testNow)
		switch name {
		case "ok":
			if err != nil || !ok || s != 1 {
				t.Fatalf("%s: %v %v %v", name, s, ok, err)
			}
		default:
			if err == nil || ok || recheck != ErrorRecheck {
				t.Fatalf("%s: %v %v %v %v, want an error, ok=false, recheck %v", name, s, ok, recheck, err, ErrorRecheck)
			}
		}
	}
	st := p.Stats()
	if st.Calls != 5 || st.Errors != 3 || st.OverBudget != 1 {
		t.Fatalf("Stats = %+v, want 5 calls, 3 errors, 1 over budget", st)
	}
}

// TestBudgetWallClock: the wall-clock backstop, or the slow-call memory
// guard, whichever comes first on this machine, stops instructions that are
// slow on their own (here string concatenation doubling a 1 MiB string), in
// score and at load, and a later call in the same state runs normally.
func TestBudgetWallClock(t *testing.T) {
	stopped := func(err error, what string) bool {
		return errors.Is(err, ErrBudget) && (strings.Contains(err.Error(), what+" stopped: ran longer than 20ms") ||
			strings.Contains(err.Error(), what+" stopped: allocated more than 16 MiB"))
	}
	opts := Options{ScoreTimeout: 20 * time.Millisecond, LoadTimeout: 20 * time.Millisecond}
	_, err := Compile("bomb", "local s = string.rep('x', 2^20)\nfor i = 1, 40 do s = s .. s end\nfunction score() return 1 end", opts)
	if !stopped(err, "the top-level chunk") {
		t.Fatalf("bomb at load: %v, want the wall-clock budget error", err)
	}
	p, err := Compile("slowop", `
function score(a, now)
  if a.name == "bomb" then
    local s = string.rep("x", 2^20)
    for i = 1, 40 do s = s .. s end
  end
  return 1
end`, opts)
	if err != nil {
		t.Fatal(err)
	}
	v := freshView()
	v.Name = "bomb"
	_, _, _, _, err = p.Score(&v, testNow)
	if !stopped(err, "score") {
		t.Fatalf("bomb: %v, want the wall-clock budget error", err)
	}
	v.Name = "ok"
	if s, ok, _, _, err := p.Score(&v, testNow); err != nil || !ok || s != 1 {
		t.Fatalf("after the bomb: %v %v %v", s, ok, err)
	}
}
