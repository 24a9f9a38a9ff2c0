package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// TestFleetHandoverCooldown: with fleet.ownership, two gateways on one
// PostgreSQL and Redis. An account owned by B learns a quota cooldown; B
// leaves (a clean stop); A takes the account over and still honours the
// cooldown — same end, same reason — instead of starting it afresh.
func TestFleetHandoverCooldown(t *testing.T) {
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	numbers := span(2, 24, 2) // openai accounts serving gpt-4.1-mini
	cfg := func() *Config {
		c := clusterConfig(t, pg, rurl, prefix)
		c.Fleet.Ownership = true
		c.Fleet.TTL, c.Fleet.Heartbeat = 2*time.Second, 100*time.Millisecond
		return c
	}
	a := startTestDemo(t, cfg(), tuned(numbers, nil))
	b, stopB := startStoppable(t, cfg())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var id string
	eventually(t, 20*time.Second, "b runs an account", func() (bool, string) {
		for _, v := range b.sys.Views() {
			if v.Available(time.Now()) {
				id = v.ID
				return true, ""
			}
		}
		return false, fmt.Sprintf("b runs %d", len(b.sys.Views()))
	})

	l, err := b.sys.Acquire(ctx, actors.AcquireRequest{Endpoint: translate.Chat, Model: "gpt-4.1-mini", Only: id})
	if err != nil {
		t.Fatal(err)
	}
	b.sys.Release(l, actors.Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassQuota, RetryAfter: time.Hour}})
	var learned actors.View
	eventually(t, 10*time.Second, "the cooldown on b", func() (bool, string) {
		learned, _ = b.sys.View(id)
		return learned.Status == actors.StatusCooling, learned.Status.String()
	})

	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a runs the account", func() (bool, string) {
		v, ok := a.app.sys.View(id)
		return ok && !v.Moving, fmt.Sprintf("present %v, moving %v", ok, v.Moving)
	})
	v, _ := a.app.sys.View(id)
	if v.Status != actors.StatusCooling || !v.CooldownUntil.Equal(learned.CooldownUntil) || v.CooldownReason != "quota" {
		t.Fatalf("on a after the move: %s until %v (%s); b learned %s until %v", v.Status, v.CooldownUntil, v.CooldownReason, learned.Status, learned.CooldownUntil)
	}
	if l, err := a.app.sys.Acquire(ctx, actors.AcquireRequest{Endpoint: translate.Chat, Model: "gpt-4.1-mini", Only: id}); err == nil {
		a.app.sys.Release(l, actors.Outcome{})
		t.Fatal("a granted a lease on the account cooling since b")
	}
}
