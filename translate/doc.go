// Package translate converts between the client protocols Troupe speaks
// (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages), requests
// and streams, and holds the project's one Server-Sent Events codec
// (Scanner, AppendEvent, AppendData, AppendComment).
//
// translate imports no other Troupe package.
package translate
