package gateway

import (
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// upstreamEndpoint is the protocol a request of client protocol client is
// sent in to an account of provider p: the client's own when p speaks it
// (then bytes pass through), else p's native protocol, translated — openai:
// Responses for Messages clients (it carries reasoning and tool calls the
// closest); codex: Responses; anthropic: Messages; openai_compat: Chat. An
// unknown provider gets the client's protocol, which its transport refuses.
func upstreamEndpoint(p storage.Provider, client translate.Protocol) translate.Protocol {
	if upstream.Supports(p, client) {
		return client
	}
	switch p {
	case storage.ProviderOpenAI, storage.ProviderCodex:
		return translate.Responses
	case storage.ProviderAnthropic:
		return translate.Messages
	case storage.ProviderOpenAICompat:
		return translate.Chat
	}
	return client
}
