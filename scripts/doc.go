// Package scripts is Troupe's Lua policy host: it compiles operator-written
// routing policies, runs them in a sandbox, self-tests them, and swaps them in
// atomically. The contract a policy implements — score(account, now),
// route(request) and the policy table — is documented field by field in
// docs/policies.md; the shipped policies are in policies/*.lua (Builtin).
//
// The package imports none of Troupe's other packages: AccountView and
// RequestView are its own types, which the scheduler fills from its views.
//
// # Pieces
//
//   - Compile turns source into a *Policy: the program is parsed and compiled
//     once (a *lua.FunctionProto that clones share) and run in a sandboxed Lua
//     state the Policy owns. Score and Route call into that state.
//   - SelfTest runs a Policy over synthetic accounts and requests and a
//     sample of the live pool, and fails on errors, wrong result types or a
//     run over budget.
//   - Host holds the active Policy: Load compiles, self-tests and swaps
//     (atomic.Pointer), keeping the last good policy on any failure, and
//     keeps a ReloadStatus for the admin API and metrics.
//   - Router runs route from any goroutine on a pool of clones, so requests
//     can be routed outside the scheduler actor.
//   - Watcher reloads the active policy's file from a policies directory.
//
// # Concurrency
//
// A Lua state is not safe for concurrent use, so a Policy's Score and Route
// must be called by one goroutine at a time: the scheduler actor owns the
// active policy. Everything else about a Policy (name, digest, version,
// knobs, stats) is safe to read anywhere. A second goroutine that must run
// the same policy — a scheduler shard, `troupe policy check` — takes a Clone.
// Host, Router and Watcher are safe for concurrent use.
//
// # Cost
//
// Score refills one reused, read-only Lua table per state instead of
// building tables (see marshal.go and BenchmarkViewStrategies), so a score of
// the default policy costs a few microseconds and a handful of allocations.
// The budget counts VM instructions in the state's context.Context, which
// gopher-lua consults before every instruction, and backs that with a
// reusable wall-clock timer (budget.go).
package scripts
