package rediscache

import (
	"strconv"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// TestMemberAge: Heartbeat gives each other member's time since its last
// announcement on the server's clock (backdated here in the stored key, as
// the clock cannot be moved), 0 for the caller, and an announcement starts
// it over; Leave takes the member's entry with it.
func TestMemberAge(t *testing.T) {
	c, url := open(t, Options{})
	rc := rawClient(t, url)
	ctx := t.Context()
	if _, err := c.Heartbeat(ctx, storage.FleetMember{ID: "x"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	tm, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, c.seenKey(), "x", strconv.FormatInt(tm.UnixMilli()-5000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	ms, err := c.Heartbeat(ctx, storage.FleetMember{ID: "y", Age: time.Hour}, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("%v %+v", err, ms)
	}
	if x, y := ms[0], ms[1]; x.Age < 5*time.Second || x.Age > 5*time.Second+time.Second || y.Age != 0 {
		t.Fatalf("ages x %v (want 5 s), y %v (want 0)", x.Age, y.Age)
	}
	if _, err := c.Heartbeat(ctx, storage.FleetMember{ID: "x"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ms, err = c.Heartbeat(ctx, storage.FleetMember{ID: "y"}, time.Minute)
	if err != nil || len(ms) != 2 || ms[0].Age > time.Second {
		t.Fatalf("%v %+v: x's age did not start over", err, ms)
	}
	if err := c.Leave(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.HExists(ctx, c.seenKey(), "x").Result(); err != nil || n {
		t.Fatalf("x's last announcement kept after Leave: %v %v", n, err)
	}
}
