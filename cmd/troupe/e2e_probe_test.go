package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// An account cooling for quota is probed: while the mock fleet still
// refuses, it keeps resting; as soon as the quota fault clears, the next
// probe's answer brings it back, long before the recorded reset (an hour
// away). Codex (a Responses probe with a counting-down reset) and openai (a
// Chat probe; its quota body has no reset) alike.
func TestQuotaProbeEndsCooldownEarly(t *testing.T) {
	cfg := testConfig(t)
	cfg.Gateway.QuotaProbe = 50 * time.Millisecond
	cfg.Gateway.MaxAttempts = 1
	d := startTestDemo(t, cfg, tuned([]int{1, 2}, func(ma *mock.Account, _ *storage.Account) {
		ma.Fault = &mock.Fault{Kind: mock.FaultRateLimitReset, ResetsIn: time.Hour}
	}))
	models := map[string]string{d.names[0]: "gpt-5.5", d.names[1]: "gpt-4.1-mini"}
	for name, model := range models {
		resp, body := d.post(t, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"hi"}`, model))
		if resp.StatusCode < 400 {
			t.Fatalf("%s: %d %s; want a refusal while every account is out of quota", name, resp.StatusCode, body)
		}
	}
	view := func(name string) actors.View {
		for _, v := range d.app.sys.Views() {
			if v.Name == name {
				return v
			}
		}
		t.Fatalf("no account %s", name)
		return actors.View{}
	}
	for name := range models {
		eventually(t, 5*time.Second, name+" cooling for quota and probed", func() (bool, string) {
			v := view(name)
			return v.Status == actors.StatusCooling && v.CooldownReason == "quota" && v.Probes >= 2 &&
				time.Until(v.CooldownUntil) > 30*time.Minute, fmt.Sprintf("%s %s probes %d until %s", v.Status, v.CooldownReason, v.Probes, v.CooldownUntil)
		})
	}
	for name, model := range models {
		d.fleet.SetFault(name, nil)
		eventually(t, 5*time.Second, name+" back after the quota cleared", func() (bool, string) {
			v := view(name)
			return v.Status == actors.StatusActive, fmt.Sprintf("%s %s probes %d", v.Status, v.CooldownReason, v.Probes)
		})
		resp, body := d.post(t, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"hi"}`, model))
		if resp.StatusCode != 200 {
			t.Errorf("%s after its quota came back: %d %s", name, resp.StatusCode, body)
		}
	}
}
