// Package mock is the mock upstream fleet: one fasthttp server that simulates
// many upstream accounts at once (OpenAI API keys, OpenAI-compatible
// endpoints, ChatGPT Codex OAuth accounts and Anthropic API keys). Tests,
// `troupe demo`, `troupe mock` and the load-test harness in bench/ point
// Troupe at it.
//
// Routes (all answers are byte-compatible with the real wire formats captured
// in the shared fixtures):
//
//	POST /v1/chat/completions        Chat Completions, JSON or SSE (kinds openai, openai_compat)
//	POST /v1/responses               Responses API, JSON or SSE (kind openai)
//	POST /backend-api/codex/responses ChatGPT Codex backend, SSE only (kind codex)
//	POST /v1/messages                Anthropic Messages, JSON or SSE (kind anthropic; x-api-key, anthropic-version)
//	POST /v1/messages/count_tokens   Anthropic token counting (kind anthropic)
//	GET  /v1/models                  the authenticated account's models (kinds openai, openai_compat;
//	                                 asked with x-api-key, kind anthropic in Anthropic's list shape)
//	GET  /backend-api/codex/models   the same for kind codex
//
// Every answer is the deterministic text AnswerText(account name, tokens), so a
// test can tell byte by byte which account served a request. Timing is per
// account: Latency before the first content event, then TokensPerSecond.
//
// # Tool turns
//
// So that real clients can run a tool through the fleet, answers follow a
// script (script.go): a request that offers a shell-like tool
// (ShellToolNames: Codex CLI's exec_command, Claude Code's Bash, …) and whose
// last user turn asks to run a command (ScriptedCommand: "Run '…'", or
// "echo …") is answered with a call to that tool, in the protocol's shape
// (Chat tool_calls, a Responses function_call item, a Messages tool_use
// block), streamed or not; a request whose last input is a tool result is
// answered with ToolResultText, which quotes it. tool_choice "none" gets
// no call.
//
// # Output limits
//
// An answer is cut at the request's output limit, in the route's own field
// (Chat max_completion_tokens or max_tokens, Responses max_output_tokens,
// Messages max_tokens), and says so as the real API does: finish_reason
// "length", status "incomplete" (a stream's last event
// response.incomplete), stop_reason "max_tokens"; its usage counts what it
// produced (limits.go).
//
// The request path takes no global lock: accounts are found by bearer token in
// a sync.Map and every counter is an atomic. Events are appended into reused
// buffers; request bodies are only scanned (gjson) for the few fields the mock
// needs.
//
// Everything an account decides about a request (which model it serves, how
// long it waits, how many tokens it streams, which fault it injects) is
// decided in one place, (*account).plan in account.go; the protocol code only
// renders that plan.
//
// # Faults
//
// An account can fail like a real upstream: Account.Fault (or
// Fleet.SetFault, live) makes it answer 429 with a quota reset or a
// Retry-After, 401, 402/403, 5xx (529 overloaded for anthropic), reset the
// connection, cut a stream before or after its first content, send an empty stream, an error event, JSON
// where a stream was asked (and the reverse), a slow first token, or hang
// (see FaultKind for the exact wire behaviour of each; fault_anthropic.go
// for the Anthropic shapes). AssignFaults spreads
// faults over a fraction of a pool from a seed; PreContentMix lists the
// kinds that strike before the client has seen any content, which a gateway
// can hide by trying another account. Faulted requests are counted in
// AccountStats.Faults. Answers without a fault are unchanged. The fault code
// is in faults.go and fault_serve.go.
package mock
