package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// isDone reports whether ctx's Done channel is closed.
func isDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// checkCtx fails t unless ctx's Err is want and its Done channel is closed
// exactly when want is not nil.
func checkCtx(t *testing.T, name string, ctx context.Context, want error) {
	t.Helper()
	if err := ctx.Err(); err != want {
		t.Errorf("%s: Err %v, want %v", name, err, want)
	}
	if isDone(ctx) != (want != nil) {
		t.Errorf("%s: Done closed %v, want %v", name, isDone(ctx), want != nil)
	}
}

// The request's context ends at RequestTimeout with DeadlineExceeded, and
// so do its attempt, a package-context child of it and a function
// registered with context.AfterFunc, as under the context.WithTimeout it
// replaced.
func TestReqCtxRequestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rc reqCtx
		rc.start(nil, 10*time.Second)
		var a attemptCtx
		rc.startAttempt(&a, 0) // a stream's: no deadline of its own
		child, cancel := context.WithCancel(&a)
		defer cancel()
		var ran atomic.Bool
		context.AfterFunc(&rc, func() { ran.Store(true) })
		if dl, ok := a.Deadline(); !ok || !dl.Equal(rc.deadline) {
			t.Errorf("attempt's deadline %v %v, want the request's %v", dl, ok, rc.deadline)
		}
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "request before its deadline", &rc, nil)
		checkCtx(t, "attempt before the deadline", &a, nil)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "request", &rc, context.DeadlineExceeded)
		checkCtx(t, "attempt", &a, context.DeadlineExceeded)
		checkCtx(t, "child", child, context.DeadlineExceeded)
		if !ran.Load() {
			t.Error("the AfterFunc did not run")
		}
	})
}

// An attempt's own deadline (NonStreamTimeout) ends only the attempt, with
// DeadlineExceeded; the request's timer, re-armed, still ends the request
// at its own deadline, also after an attempt that ended before its
// deadline left the timer armed for it.
func TestReqCtxAttemptDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rc reqCtx
		rc.start(nil, 10*time.Second)
		var a1 attemptCtx
		rc.startAttempt(&a1, 3*time.Second)
		if dl, _ := a1.Deadline(); !dl.Equal(rc.deadline.Add(-7 * time.Second)) {
			t.Errorf("attempt's deadline %v, want 3 s from the start", dl)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		checkCtx(t, "first attempt at its deadline", &a1, context.DeadlineExceeded)
		checkCtx(t, "request at its attempt's deadline", &rc, nil)

		var a2 attemptCtx // a failover, ended by its caller before its deadline
		rc.startAttempt(&a2, 3*time.Second)
		time.Sleep(time.Second)
		a2.cancel()
		checkCtx(t, "second attempt, cancelled", &a2, context.Canceled)
		var a3 attemptCtx // its deadline would be past the request's
		rc.startAttempt(&a3, 30*time.Second)
		if dl, _ := a3.Deadline(); !dl.Equal(rc.deadline) {
			t.Errorf("third attempt's deadline %v, want the request's %v", dl, rc.deadline)
		}
		time.Sleep(6*time.Second - time.Nanosecond) // past the second attempt's deadline, just short of the request's
		synctest.Wait()
		checkCtx(t, "request just before its deadline", &rc, nil)
		checkCtx(t, "third attempt just before the request's deadline", &a3, nil)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "request at its deadline", &rc, context.DeadlineExceeded)
		checkCtx(t, "third attempt at the request's deadline", &a3, context.DeadlineExceeded)
		checkCtx(t, "second attempt", &a2, context.Canceled)
		checkCtx(t, "first attempt", &a1, context.DeadlineExceeded)
	})
}

// TestReqCtxHoldBound: a stream's first-token bound (holdBound) ends its attempt on the
// request's timer, with context.Canceled as the hold's own timer did, and
// unbound reports it; a bound lifted before it is reached ends nothing,
// the request's timer, armed for it, re-arms, and the request still ends
// at its deadline. The bound is not the attempt's Deadline.
func TestReqCtxHoldBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rc reqCtx
		rc.start(nil, 10*time.Second)
		var a1 attemptCtx
		rc.startAttempt(&a1, 0)
		var closed atomic.Bool
		context.AfterFunc(&a1, func() { closed.Store(true) }) // as sendFast registers its connection's close
		a1.holdBound(2 * time.Second)
		if dl, _ := a1.Deadline(); !dl.Equal(rc.deadline) {
			t.Errorf("attempt's deadline %v, want the request's %v", dl, rc.deadline)
		}
		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "attempt before its bound", &a1, nil)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "attempt at its bound", &a1, context.Canceled)
		checkCtx(t, "request after the bound", &rc, nil)
		if !closed.Load() {
			t.Error("the attempt's AfterFunc did not run at the bound")
		}
		for range 2 { // and again, as hold's deferred call does
			if !a1.unbound() {
				t.Error("unbound did not report the bound reached")
			}
		}

		var a2 attemptCtx
		rc.startAttempt(&a2, 0)
		a2.holdBound(2 * time.Second)
		time.Sleep(time.Second)
		if a2.unbound() {
			t.Error("unbound reported a bound not reached")
		}
		time.Sleep(5 * time.Second) // past the lifted bound
		synctest.Wait()
		checkCtx(t, "attempt after its bound was lifted", &a2, nil)
		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "request before its deadline", &rc, nil)
		time.Sleep(time.Nanosecond) // 10 s since the request began
		synctest.Wait()
		checkCtx(t, "request at its deadline", &rc, context.DeadlineExceeded)
		checkCtx(t, "attempt at the request's deadline", &a2, context.DeadlineExceeded)
		if a2.unbound() {
			t.Error("the request's deadline counted as the bound")
		}

		var rc2 reqCtx // a bound past the request's deadline is left to it
		rc2.start(nil, time.Second)
		var a3 attemptCtx
		rc2.startAttempt(&a3, 0)
		a3.holdBound(time.Minute)
		time.Sleep(time.Second)
		synctest.Wait()
		checkCtx(t, "attempt of a request past its deadline", &a3, context.DeadlineExceeded)
		if a3.unbound() {
			t.Error("a bound past the request's deadline was reported reached")
		}
	})
}

// beatLog is a beater that counts its beats and asks for the next after
// again (0: none).
type beatLog struct {
	n     atomic.Int32
	again time.Duration
}

func (b *beatLog) beat() time.Duration { b.n.Add(1); return b.again }

// TestReqCtxBeat: a beat set on a request (setBeat) is called on the
// request's timer when due and again after what it returns; a beater
// replaced gets no more; a beat that would fall past the request's
// deadline is not armed; the request's and its attempts' deadlines hold
// meanwhile.
func TestReqCtxBeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rc reqCtx
		rc.start(nil, 10*time.Second)
		var a1 attemptCtx
		rc.startAttempt(&a1, 3*time.Second)
		b1 := &beatLog{again: 2 * time.Second}
		rc.setBeat(b1, time.Second)
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if n := b1.n.Load(); n != 0 {
			t.Errorf("%d beats before the first was due", n)
		}
		time.Sleep(time.Nanosecond) // 1 s: the first beat
		synctest.Wait()
		if n := b1.n.Load(); n != 1 {
			t.Errorf("%d beats at 1 s, want 1", n)
		}
		time.Sleep(2 * time.Second) // 3 s: the second, and the attempt's deadline
		synctest.Wait()
		if n := b1.n.Load(); n != 2 {
			t.Errorf("%d beats at 3 s, want 2", n)
		}
		checkCtx(t, "attempt at its deadline", &a1, context.DeadlineExceeded)

		b2 := &beatLog{} // one beat only
		rc.setBeat(b2, 500*time.Millisecond)
		time.Sleep(3 * time.Second) // 6 s
		synctest.Wait()
		if n1, n2 := b1.n.Load(), b2.n.Load(); n1 != 2 || n2 != 1 {
			t.Errorf("beats after the replacement: replaced %d (want 2), new %d (want 1)", n1, n2)
		}
		rc.setBeat(b2, 5*time.Second) // past the deadline (10 s)
		time.Sleep(4*time.Second - time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "request before its deadline", &rc, nil)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		checkCtx(t, "request at its deadline", &rc, context.DeadlineExceeded)
		if n := b2.n.Load(); n != 1 {
			t.Errorf("%d beats of a beat set past the deadline, want none after the first", n-1)
		}
	})
}

// cancel ends the request (the client is gone, or it is over) with
// Canceled: its attempts too, and an attempt started after it starts
// ended. An attempt's cancel leaves the request running.
func TestReqCtxCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rc reqCtx
		rc.start(nil, time.Minute)
		var a1, a2 attemptCtx
		rc.startAttempt(&a1, time.Second)
		a1.cancel()
		checkCtx(t, "cancelled attempt", &a1, context.Canceled)
		checkCtx(t, "request after its attempt's cancel", &rc, nil)
		rc.startAttempt(&a2, time.Second)
		done := a2.Done() // made before the end: closed by it
		rc.cancel()
		<-done
		checkCtx(t, "request", &rc, context.Canceled)
		checkCtx(t, "attempt", &a2, context.Canceled)
		rc.cancel() // a second end changes nothing
		var a3 attemptCtx
		rc.startAttempt(&a3, time.Second)
		checkCtx(t, "attempt started after the end", &a3, context.Canceled)
		time.Sleep(2 * time.Minute) // no timer ends it again
		synctest.Wait()
		checkCtx(t, "request after its deadline", &rc, context.Canceled)
	})
}

// AfterFunc keeps context.AfterFunc's contract: f runs in its own
// goroutine once the context ends (at once when it has), and stop reports
// whether it kept f from running.
func TestReqCtxAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rc reqCtx
		rc.start(nil, time.Minute)
		var a attemptCtx
		rc.startAttempt(&a, 0)
		var mu sync.Mutex
		var ran []string
		reg := func(ctx interface{ AfterFunc(func()) func() bool }, name string) func() bool {
			return ctx.AfterFunc(func() {
				mu.Lock()
				ran = append(ran, name)
				mu.Unlock()
			})
		}
		stopped := reg(&a, "stopped")
		reg(&a, "attempt 1")
		reg(&a, "attempt 2")
		reg(&a, "attempt 3") // past the two inline slots
		stopR := reg(&rc, "request")
		if !stopped() || stopped() {
			t.Error("stop before the end: want true, then false")
		}
		rc.cancel()
		synctest.Wait()
		if stopR() {
			t.Error("stop after f ran returned true")
		}
		reg(&rc, "after the end")
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 5 {
			t.Errorf("ran %q, want the three attempt's, the request's and the late one", ran)
		}
		for _, r := range ran {
			if r == "stopped" {
				t.Error("a stopped func ran")
			}
		}
	})
}

// Shutdown's end of the live set cancels every request in it, and one
// that starts afterwards; a request that ended left the set.
func TestLiveSetEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l liveSet
		var r1, r2, r3 reqCtx
		r1.start(&l, time.Minute)
		r2.start(&l, time.Minute)
		r3.start(&l, time.Minute)
		r2.cancel()
		if r2.inSet || l.head != &r3 || r3.next != &r1 || r1.prev != &r3 {
			t.Fatal("an ended request did not leave the set")
		}
		var a attemptCtx
		r1.startAttempt(&a, time.Second)
		l.end()
		checkCtx(t, "first request", &r1, context.Canceled)
		checkCtx(t, "its attempt", &a, context.Canceled)
		checkCtx(t, "third request", &r3, context.Canceled)
		if l.head != nil {
			t.Error("requests left in the set after its end")
		}
		var r4 reqCtx
		r4.start(&l, time.Minute)
		checkCtx(t, "request started after the end", &r4, context.Canceled)
	})
}

// chatJSON is a Chat Completions answer.
var chatJSON = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)

// chatBody is a non-stream Chat Completions request.
var chatBody = []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)

// endSeen answers only when its call's context ends, with the error the
// real transports give then (a timeout for a deadline), and sends that
// context's error on errs.
type endSeen struct{ errs chan error }

func (e endSeen) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	<-ctx.Done()
	err := ctx.Err()
	e.errs <- err
	kind := upstream.KindCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		kind = upstream.KindTimeout
	}
	return nil, &upstream.Error{Kind: kind, Err: err}
}

// NonStreamTimeout ends one attempt, with DeadlineExceeded, and the
// request fails over to the next account, which answers.
func TestNonStreamTimeoutFailsOver(t *testing.T) {
	hung := endSeen{errs: make(chan error, 1)}
	tr := &scripted{answers: []upstream.Transport{hung, cannedTransport{200, "application/json", chatJSON}}}
	s, sys, key := testServerCfg(t, 2, tr, Config{MaxWait: 100 * time.Millisecond, NonStreamTimeout: 50 * time.Millisecond})
	resp := do(s, "POST", "/v1/chat/completions", key, chatBody)
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	if err := <-hung.errs; err != context.DeadlineExceeded {
		t.Errorf("the first attempt ended with %v, want its deadline", err)
	}
	waitIdle(t, sys)
	recs := logged(t, s)
	if len(recs) != 1 || recs[0].Status != 200 || recs[0].Attempts != 2 {
		t.Fatalf("records %+v, want one of status 200 after 2 attempts", recs)
	}
}

// RequestTimeout ends a request during its attempt: the upstream call sees
// the deadline, and the request is not failed over (its time is up).
func TestRequestTimeoutEndsAttempt(t *testing.T) {
	hung := endSeen{errs: make(chan error, 2)}
	s, sys, key := testServerCfg(t, 2, hung, Config{MaxWait: 100 * time.Millisecond, RequestTimeout: 50 * time.Millisecond})
	resp := do(s, "POST", "/v1/chat/completions", key, chatBody)
	if resp.StatusCode() != 502 {
		t.Fatalf("status %d body %s, want 502", resp.StatusCode(), resp.Body())
	}
	if err := <-hung.errs; err != context.DeadlineExceeded {
		t.Errorf("the attempt ended with %v, want the request's deadline", err)
	}
	waitIdle(t, sys)
	if recs := logged(t, s); len(recs) != 1 || recs[0].Attempts != 1 {
		t.Fatalf("records %+v, want one after 1 attempt", recs)
	}
}

// blocking answers when release is closed, whatever its context says;
// started receives a value as each call begins.
type blocking struct{ started, release chan struct{} }

func (b blocking) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	b.started <- struct{}{}
	<-b.release
	return cannedTransport{200, "application/json", chatJSON}.Do(ctx, r)
}

// RequestTimeout ends a request still waiting for an account: it is
// answered and recorded 499, as a cancelled one.
func TestRequestTimeoutWhileWaiting(t *testing.T) {
	up := blocking{started: make(chan struct{}, 2), release: make(chan struct{})}
	s, sys, key := testServerCfg(t, 1, up, Config{MaxWait: time.Minute, RequestTimeout: time.Minute})
	sys.PutAccount(storage.Account{ID: "a0", Name: "acct-0", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 1})
	waitUntil(t, "the account's new limit", func() bool {
		v := sys.Views()
		return len(v) == 1 && v[0].MaxInFlight == 1
	})
	first := make(chan int)
	go func() { first <- do(s, "POST", "/v1/chat/completions", key, chatBody).StatusCode() }()
	select { // the first request holds the only lease
	case <-up.started:
	case st := <-first:
		t.Fatalf("the first request ended (status %d) before reaching the upstream", st)
	}
	s.cfg.RequestTimeout = 50 * time.Millisecond
	resp := do(s, "POST", "/v1/chat/completions", key, chatBody)
	close(up.release)
	if resp.StatusCode() != statusClientClosed {
		t.Errorf("status %d body %s, want 499", resp.StatusCode(), resp.Body())
	}
	if st := <-first; st != 200 {
		t.Errorf("the first request: status %d", st)
	}
	waitIdle(t, sys)
}
