package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/internal/poll"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// BenchmarkGrant measures what a remote grant adds to an acquire: one
// acquire and release per op of an account this instance runs (local),
// and of one another instance runs, over the internal endpoint on
// loopback (remote: HMAC-signed request and reply, the credential sealed
// and opened, the release sent in the background). docs/benchmarks.md.
func BenchmarkGrant(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memcache.New(memcache.Options{})
	defer store.Close()
	accs := peerAccounts()
	for i := range accs {
		accs[i].MaxConcurrency = 1 << 20 // the releases go in the background
	}
	a := startPeerNode(b, ctx, store, testKey(7), "gw-a", accs, "acc-a")
	bn := startPeerNode(b, ctx, store, testKey(7), "gw-b", accs, "acc-b")
	poll.Until(b, 5*time.Second, "each instance indexes the other's account", func() bool {
		return a.sys.RemoteAccounts() == 1 && bn.sys.RemoteAccounts() == 1
	})
	for _, bc := range []struct{ name, only string }{{"local", "acc-a"}, {"remote", "acc-b"}} {
		b.Run(bc.name, func(b *testing.B) {
			req := actors.AcquireRequest{Model: "m", Only: bc.only}
			b.ReportAllocs()
			for b.Loop() {
				l, err := a.sys.Acquire(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				a.sys.Release(l, actors.Outcome{Status: 200})
			}
			b.StopTimer()
			poll.Until(b, 10*time.Second, "every remote lease released", func() bool { return bn.peer.Stats().Held == 0 })
		})
	}
}
