package translate

import (
	"encoding/base64"
	"strings"

	"github.com/tidwall/gjson"
)

// Reasoning effort and thinking budgets. OpenAI names an effort
// (reasoning_effort, reasoning.effort: minimal, low, medium, high, xhigh);
// Anthropic a token budget (thinking.budget_tokens, at least 1024 and less
// than max_tokens) or, for adaptive thinking, output_config.effort (low,
// medium, high, max). The tables below are Troupe's choice
// (docs/translation.md).

// budgetForEffort is the thinking budget an OpenAI effort becomes.
func budgetForEffort(effort string) int64 {
	switch effort {
	case "minimal":
		return 1024
	case "low":
		return 4096
	case "medium":
		return 10240
	case "high":
		return 24576
	case "xhigh", "max":
		return 32768
	}
	return 0
}

// effortForBudget is the OpenAI effort a thinking budget becomes.
func effortForBudget(budget int64) string {
	switch {
	case budget <= 0:
		return ""
	case budget < 4096:
		return "low"
	case budget < 16384:
		return "medium"
	default:
		return "high"
	}
}

// openAIEffort maps an Anthropic output_config.effort to OpenAI's name.
func openAIEffort(e string) string {
	if e == "max" {
		return "xhigh"
	}
	return e
}

// Reasoning that crosses between providers travels in the fields the client
// protocol has for opaque reasoning state, tagged with its origin, so it can
// go back to the provider that made it:
//   - an Anthropic thinking signature becomes a Responses encrypted_content
//     sigAnthropic+signature (and redacted_thinking data sigRedacted+data);
//   - a Responses reasoning item with encrypted_content becomes an Anthropic
//     signature sigOpenAIItem+base64(the item's JSON as the upstream sent
//     it), so that the next turn sends the item back byte for byte (its id,
//     summaries and encrypted_content); sigOpenAI+encrypted_content, the
//     earlier form, is still read.
//
// Reasoning tagged for the other provider, or untagged reasoning of the
// other provider, is dropped from the history sent upstream: it cannot be
// verified there (docs/translation.md).
const (
	sigAnthropic  = "troupe.anthropic.v1:"
	sigRedacted   = "troupe.anthropic-redacted.v1:"
	sigOpenAI     = "troupe.openai.v1:"
	sigOpenAIItem = "troupe.openai.v2:"
	sigOpenAIAny  = "troupe.openai." // every version
)

// anthropicThinking returns the thinking block fields a reasoning part
// becomes for an Anthropic upstream; ok is false when it must be dropped.
func anthropicThinking(p *part) (thinking, signature, redacted string, ok bool) {
	if p.redacted != "" {
		return "", "", p.redacted, true
	}
	if p.signature != "" && !strings.HasPrefix(p.signature, sigOpenAIAny) {
		return p.text, p.signature, "", true
	}
	if s, found := strings.CutPrefix(p.encrypted, sigAnthropic); found {
		return p.text, s, "", true
	}
	if s, found := strings.CutPrefix(p.encrypted, sigRedacted); found {
		return "", "", s, true
	}
	return "", "", "", false
}

// openAIReasoning returns the encrypted_content a reasoning part becomes for
// an OpenAI Responses upstream; ok is false when it must be dropped.
func openAIReasoning(p *part) (encrypted string, ok bool) {
	if p.encrypted != "" && !strings.HasPrefix(p.encrypted, sigAnthropic) && !strings.HasPrefix(p.encrypted, sigRedacted) {
		return p.encrypted, true
	}
	if s, found := strings.CutPrefix(p.signature, sigOpenAI); found {
		return s, true
	}
	return "", false
}

// openAIItemSignature returns the Anthropic signature that carries a
// Responses reasoning item (its raw JSON); "" for an item without
// encrypted_content, which holds no state to carry.
func openAIItemSignature(item string) string {
	if gjson.Get(item, "encrypted_content").Str == "" {
		return ""
	}
	return sigOpenAIItem + base64.StdEncoding.EncodeToString([]byte(item))
}

// openAIItem reads a signature made by openAIItemSignature: the reasoning
// item's raw JSON and its encrypted_content. ok is false when sig is not
// of that form; err is a 400 about param when it is but does not hold a
// reasoning item with encrypted_content (Troupe never makes one).
func openAIItem(sig, param string) (item, encrypted string, ok bool, err error) {
	b64, found := strings.CutPrefix(sig, sigOpenAIItem)
	if !found {
		return "", "", false, nil
	}
	raw, derr := base64.StdEncoding.DecodeString(b64)
	it := gjson.ParseBytes(raw)
	if derr != nil || !ValidWithin(raw, maxDepth) || !it.IsObject() ||
		it.Get("type").Str != "reasoning" || it.Get("encrypted_content").Str == "" {
		return "", "", true, badRequest(param, "the thinking signature is not one Troupe gave: it must be sent back unmodified")
	}
	return string(raw), it.Get("encrypted_content").Str, true, nil
}
