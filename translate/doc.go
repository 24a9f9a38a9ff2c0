// Package translate converts between the client protocols Troupe speaks
// (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages) and holds
// the project's one Server-Sent Events codec (Scanner, AppendEvent,
// AppendData, AppendComment).
//
// Requests (TranslateRequest), non-stream answers (TranslateResponse),
// error bodies (TranslateError, AppendErrorBody) and streams (NewStream,
// event by event) go through one canonical model: each protocol has one
// decoder into it and one encoder out of it, so the six directions share
// every mapping. What a target protocol cannot express is refused with a
// 400 *Error rather than dropped; docs/translation.md maps every field.
//
// translate imports no other Troupe package.
package translate
