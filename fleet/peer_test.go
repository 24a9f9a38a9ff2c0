package fleet

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/internal/poll"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/upstream"
)

type nopUsage struct{}

func (nopUsage) InsertUsage(context.Context, []storage.UsageRecord) error { return nil }

// peerNode is one instance of an in-process deployment: actors with
// ownership, a Fleet on a shared in-memory store, the view exchange and
// the internal endpoint on an httptest server.
type peerNode struct {
	id   string
	sys  *actors.System
	peer *Peer
	srv  *httptest.Server
	logs *lockedWriter
	// heldLost, set, loses this instance's answers to PathHeld (503), as
	// a member slow or cut from the asker would.
	heldLost atomic.Bool
	heldAsks atomic.Int64 // PathHeld messages received
	// withholdFor is the peer's PeerConfig.WithholdFor (0: the default).
	withholdFor time.Duration
}

// handler serves the internal endpoint from an http.Request, as the
// front's mount does from fasthttp's.
func (n *peerNode) handler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == PathHeld {
		n.heldAsks.Add(1)
	}
	if r.URL.Path == PathHeld && n.heldLost.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	env := Envelope{Sender: r.Header.Get(HeaderSender), Time: r.Header.Get(HeaderTime),
		Nonce: r.Header.Get(HeaderNonce), Signature: r.Header.Get(HeaderSignature)}
	status, renv, out := n.peer.Handle(r.Context(), r.URL.Path, env, body)
	if renv.Signature != "" {
		w.Header().Set(HeaderSender, renv.Sender)
		w.Header().Set(HeaderTime, renv.Time)
		w.Header().Set(HeaderNonce, renv.Nonce)
		w.Header().Set(HeaderSignature, renv.Signature)
	}
	w.WriteHeader(status)
	w.Write(out)
}

// startPeerNode starts instance id owning the accounts named in owned
// (every account in accs is put; only the owned ones run here).
func startPeerNode(t testing.TB, ctx context.Context, store *memcache.Cache, master []byte, id string, accs []storage.Account, owned ...string) *peerNode {
	t.Helper()
	n := &peerNode{id: id, logs: &lockedWriter{w: &bytes.Buffer{}}}
	n.start(t, ctx, store, store, master, accs)
	fence := new(actors.Fence)
	fence.Extend(time.Now().Add(time.Hour), 1)
	for _, o := range owned {
		n.sys.Own(o, fence)
	}
	return n
}

// start starts n's pool (fenced: it runs only what it is given to own),
// its internal endpoint, its membership in members, its peer and its
// views in views, and puts every account in accs. It returns n's fleet
// and logger.
func (n *peerNode) start(t testing.TB, ctx context.Context, members storage.Membership, views *memcache.Cache, master []byte, accs []storage.Account) (*Fleet, *slog.Logger) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(n.logs, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", n.id, n.logs.String())
		}
	})
	sys, err := actors.Start(actors.Config{Store: nopUsage{}, Fenced: true, QuotaProbe: -1, Logger: log,
		Transport: func(a storage.Account) (upstream.Transport, error) { return upstream.New(a, upstream.Options{}) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	n.sys = sys
	n.srv = httptest.NewServer(http.HandlerFunc(n.handler))
	t.Cleanup(n.srv.Close)
	f, err := Start(ctx, Config{Store: members, Self: Member{ID: n.id, Addr: strings.TrimPrefix(n.srv.URL, "http://")},
		TTL: 2 * time.Second, Interval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	codec, err := NewCodec(master)
	if err != nil {
		t.Fatal(err)
	}
	if n.peer, err = StartPeer(ctx, PeerConfig{Fleet: f, Codec: codec, Pool: sys, Logger: log, WithholdFor: n.withholdFor}); err != nil {
		t.Fatal(err)
	}
	sys.SetRemote(n.peer)
	if err := StartViews(ctx, ViewsConfig{Fleet: f, Cache: views, Pool: sys, Interval: 20 * time.Millisecond, Logger: log, Peer: n.peer}); err != nil {
		t.Fatal(err)
	}
	for _, a := range accs {
		sys.PutAccount(a)
	}
	return f, log
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func peerAccounts() []storage.Account {
	return []storage.Account{
		{ID: "acc-a", Name: "a", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1", Credentials: storage.Credentials{APIKey: "sk-a-secret"}, Models: []string{"m"}, MaxConcurrency: 1},
		{ID: "acc-b", Name: "b", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1", Credentials: storage.Credentials{APIKey: "sk-b-secret"}, Models: []string{"m"}, MaxConcurrency: 1},
	}
}

// TestRemoteGrant: two instances, each owning one account of a model. A
// request to one is served by the other's account too (a remote grant,
// with the credential sealed in transit), never past its limit; the
// outcome released on the caller cools the account on its owner, and the
// caller sees the cooldown in the owner's next view.
func TestRemoteGrant(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memcache.New(memcache.Options{})
	defer store.Close()
	master := testKey(7)
	a := startPeerNode(t, ctx, store, master, "gw-a", peerAccounts(), "acc-a")
	b := startPeerNode(t, ctx, store, master, "gw-b", peerAccounts(), "acc-b")
	poll.Until(t, 5*time.Second, "each instance indexes the other's account", func() bool {
		return a.sys.RemoteAccounts() == 1 && b.sys.RemoteAccounts() == 1
	})

	req := actors.AcquireRequest{Model: "m"}
	l1, err := a.sys.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req.Exclude = []string{l1.AccountID}
	l2, err := a.sys.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("the second account (other instance's or own): %v; first %s; a %+v b %+v\n%s\n%s", err, l1.AccountID, a.peer.Stats(), b.peer.Stats(), a.logs.String(), b.logs.String())
	}
	got := map[string]bool{l1.AccountID: true, l2.AccountID: true}
	if !got["acc-a"] || !got["acc-b"] {
		t.Fatalf("leases on %v, want acc-a and acc-b", got)
	}
	remote := l1
	if l2.AccountID == "acc-b" {
		remote = l2
	}
	if remote.Transport == nil || remote.Name != "b" {
		t.Fatalf("remote lease %+v: no transport", remote)
	}
	// Both accounts are at their limit: a third request is refused (no wait).
	if l3, err := a.sys.Acquire(ctx, actors.AcquireRequest{Model: "m"}); err == nil {
		t.Fatalf("a third lease on %s past both limits", l3.AccountID)
	}
	if v, _ := b.sys.View("acc-b"); v.InFlight != 1 {
		t.Errorf("owner sees %d in flight on acc-b, want 1", v.InFlight)
	}
	// A request to the owner itself finds its account busy: the remote
	// lease counts against the limit where it is exact.
	if l, err := b.sys.Acquire(ctx, actors.AcquireRequest{Model: "m", Only: "acc-b"}); err == nil {
		t.Fatalf("owner granted acc-b past its limit (lease %d)", l.ID)
	}

	a.sys.Release(remote, actors.Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassQuota, RetryAfter: time.Hour}})
	a.sys.Release(map[bool]*actors.Lease{true: l2, false: l1}[remote == l1], actors.Outcome{Status: 200})
	poll.Until(t, 5*time.Second, "the owner cools acc-b down", func() bool {
		v, _ := b.sys.View("acc-b")
		return v.Status == actors.StatusCooling && v.InFlight == 0
	})
	// The caller honours the cooldown from the owner's next view: only acc-a serves.
	poll.Until(t, 2*time.Second, "the caller sees acc-b cooling", func() bool {
		l, err := a.sys.Acquire(ctx, actors.AcquireRequest{Model: "m", Exclude: []string{"acc-a"}})
		if err == nil {
			a.sys.Release(l, actors.Outcome{Verdict: upstream.Verdict{Class: upstream.ClassCanceled}})
			return false
		}
		return true
	})
	if st := a.peer.Stats(); st.Received != 1 {
		t.Errorf("caller's stats %+v, want 1 received", st)
	}
	if st := b.peer.Stats(); st.Issued != 1 || st.Held != 0 {
		t.Errorf("owner's stats %+v, want 1 issued, 0 held", st)
	}
	for _, n := range []*peerNode{a, b} {
		if s := n.logs.String(); strings.Contains(s, "sk-b-secret") || strings.Contains(s, "sk-a-secret") {
			t.Errorf("%s's log holds a credential:\n%s", n.id, s)
		}
	}
}

// TestInternalEndpointRefuses: a message without the deployment's key, a
// replayed one and a stale one are refused with 401, counted by reason
// and logged without the body.
func TestInternalEndpointRefuses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memcache.New(memcache.Options{})
	defer store.Close()
	b := startPeerNode(t, ctx, store, testKey(7), "gw-b", peerAccounts(), "acc-b")
	body := []byte(`{"account":"acc-b","model":"m"}`)
	post := func(env Envelope) int {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+PathGrant, bytes.NewReader(body))
		req.Header.Set(HeaderSender, env.Sender)
		req.Header.Set(HeaderTime, env.Time)
		req.Header.Set(HeaderNonce, env.Nonce)
		req.Header.Set(HeaderSignature, env.Signature)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(out, []byte("sk-b-secret")) && resp.StatusCode != 200 {
			t.Error("a refusal holds the credential")
		}
		return resp.StatusCode
	}
	forger, _ := NewCodec(testKey(8))
	if s := post(forger.Sign("gw-x", PathGrant, body)); s != http.StatusUnauthorized {
		t.Errorf("another key: status %d, want 401", s)
	}
	good, _ := NewCodec(testKey(7))
	env := good.Sign("gw-x", PathGrant, body)
	if s := post(env); s != http.StatusOK {
		t.Fatalf("a good message: status %d", s)
	}
	if s := post(env); s != http.StatusUnauthorized {
		t.Errorf("replayed: status %d, want 401", s)
	}
	good.Now = func() time.Time { return time.Now().Add(-time.Minute) }
	if s := post(good.Sign("gw-x", PathGrant, body)); s != http.StatusUnauthorized {
		t.Errorf("stale: status %d, want 401", s)
	}
	st := b.peer.Stats()
	for _, r := range []string{"forged", "replayed", "stale"} {
		if st.Refused[r] != 1 {
			t.Errorf("refused[%s] = %d, want 1 (%v)", r, st.Refused[r], st.Refused)
		}
	}
	logs := b.logs.String()
	if !strings.Contains(logs, "internal message refused") || strings.Contains(logs, `acc-b","model"`) {
		t.Errorf("log:\n%s", logs)
	}
	if strings.Contains(logs, "sk-b-secret") {
		t.Error("the log holds the credential")
	}
}
