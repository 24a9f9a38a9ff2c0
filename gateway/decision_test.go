package gateway

import (
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
)

func TestAppendDecision(t *testing.T) {
	c := &call{key: &noKey, attempts: 2, group: "team a", provider: storage.ProviderOpenAI, tags: []string{"fast", "eu"}, sticky: "s1"}
	c.decision = &actors.Decision{
		Policy: "smart", PolicyVersion: 3, Canary: true, Via: actors.ViaScore, Candidates: 120, Skipped: 2,
		NTop: 2, Chosen: 1, Refusals: 1, Waited: 12 * time.Millisecond,
		Top: [actors.TraceTop]actors.Ranked{{Name: "acct,1", Score: 98.5, Tier: scripts.TierHealthy}, {Name: "acct-2", Score: 97, Tier: scripts.TierWarm}},
	}
	want := "policy=smart@3 canary=1 via=score candidates=120 skipped=2 filters=group:team_a,provider:openai,tags:fast|eu,sticky " +
		"top=acct_1:98.5:healthy,acct-2:97:warm chosen=acct-2 attempt=2 refusals=1 waited_ms=12"
	if got := decisionText(c); got != want {
		t.Errorf("decision\n got %q\nwant %q", got, want)
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf = appendDecision(buf[:0], c) }); n != 0 {
		t.Errorf("appendDecision: %v allocs into a large enough buffer, want 0", n)
	}
	if got := decisionText(&call{key: &noKey}); got != "" {
		t.Errorf("no decision: %q", got)
	}
}
