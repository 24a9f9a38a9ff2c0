package scripts

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestHostLoadSwapsAndVersions(t *testing.T) {
	sampled := 0
	h := NewHost(HostOptions{Options: testOptions, Sample: func() []AccountView { sampled++; return []AccountView{freshView()} }})
	if h.Active() != nil || h.Status().Version != 0 {
		t.Fatal("a new host serves a policy")
	}
	p1, err := h.LoadBuiltin("smart")
	if err != nil {
		t.Fatal(err)
	}
	if h.Active() != p1 || p1.Version() != 0 || sampled != 1 {
		t.Fatalf("after the first load: active %p version %d sampled %d", h.Active(), p1.Version(), sampled)
	}
	st := h.Status()
	if !st.OK || st.Name != "smart" || st.Active != "smart" || st.Version != 0 || st.Digest != p1.Digest() || st.Loads != 1 || st.Failures != 0 || st.At.IsZero() {
		t.Fatalf("status = %+v", st)
	}

	// The same source again: nothing is swapped.
	same, err := h.LoadBuiltin("smart")
	if err != nil || same != p1 || h.Status().Version != 0 || h.Status().Loads != 2 {
		t.Fatalf("reloading the same source: %p %v, version %d", same, err, h.Status().Version)
	}

	// A stored version carries its number; the same source under another
	// stored version is swapped in under that number.
	src, _ := Builtin("round_robin")
	p2, err := h.LoadVersion("round_robin", src, 2)
	if err != nil || h.Active() != p2 || p2.Version() != 2 || h.Status().Version != 2 {
		t.Fatalf("second policy: %v, version %d", err, p2.Version())
	}
	p3, err := h.LoadVersion("round_robin", src, 3)
	if err != nil || h.Active() != p3 || p3 == p2 || h.Status().Version != 3 {
		t.Fatalf("same source as version 3: %v, version %d", err, h.Status().Version)
	}

	// A failure keeps p3 and reports the line.
	_, err = h.Load("broken", "function score(a)\n  return a.x.y\nend")
	if err == nil || h.Active() != p3 {
		t.Fatalf("broken load: err %v, active %v", err, h.Active().Name())
	}
	st = h.Status()
	if st.OK || st.Name != "broken" || st.Line != 2 || !strings.Contains(st.Error, "policy broken:2:") || st.Active != "round_robin" || st.Version != 3 || st.Loads != 5 || st.Failures != 1 {
		t.Fatalf("status after failure = %+v", st)
	}

	if _, err := h.LoadBuiltin("nope"); err == nil {
		t.Fatal("LoadBuiltin(nope) succeeded")
	}
}

// TestHostConcurrentLoads: loads from several goroutines (file watcher,
// admin API, SIGHUP) are serialized; readers always see a whole policy.
func TestHostConcurrentLoads(t *testing.T) {
	h := NewHost(HostOptions{Options: testOptions})
	if _, err := h.LoadBuiltin("smart"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 5 {
				name := Builtins()[(i+j)%len(Builtins())]
				if _, err := h.LoadBuiltin(name); err != nil {
					t.Error(err)
				}
				if _, err := h.Load("bad", "function score() return 'x' end"); err == nil {
					t.Error("bad policy loaded")
				}
			}
		}()
	}
	for range 1000 {
		p := h.Active()
		if p == nil || p.Name() == "bad" || p.Digest() == "" {
			t.Fatalf("reader saw %v", p)
		}
		_ = h.Status()
	}
	wg.Wait()
	if st := h.Status(); st.Failures != 20 || st.Loads != 41 {
		t.Fatalf("status = %+v", st)
	}
}

func TestHostSelfTestUsesSample(t *testing.T) {
	// The policy fails only on an account in the live pool sample.
	src := `function score(a, now)
  if a.plan == "enterprise" then return a.missing.field end
  return 1
end`
	sample := []AccountView{freshView(), freshView()}
	sample[1].Name, sample[1].Plan = "big-customer", "enterprise"
	h := NewHost(HostOptions{Options: testOptions, Sample: func() []AccountView { return sample }})
	_, err := h.Load("picky", src)
	var pe *Error
	if !errors.As(err, &pe) || pe.Line != 2 || !strings.Contains(err.Error(), `pool account "big-customer"`) {
		t.Fatalf("Load = %v, want the sample account's error at line 2", err)
	}
}

// Prepare compiles and self-tests without activating; Install activates the
// prepared policy under its version; a bad source is refused by Prepare.
func TestHostPrepareInstall(t *testing.T) {
	var swapped []string
	h := NewHost(HostOptions{Install: func(p *Policy) (func(), error) { return func() { swapped = append(swapped, p.Name()) }, nil }})
	if _, err := h.LoadBuiltin("round_robin"); err != nil {
		t.Fatal(err)
	}
	src, _ := Builtin("least_inflight")
	p, err := h.Prepare("least_inflight", src, 2)
	if err != nil {
		t.Fatal(err)
	}
	if h.Active().Name() != "round_robin" || p.Version() != 2 {
		t.Fatalf("after Prepare: active %s, prepared version %d; want round_robin and 2", h.Active().Name(), p.Version())
	}
	if err := h.Install(p); err != nil {
		t.Fatal(err)
	}
	if h.Active() != p || h.Status().Version != 2 || len(swapped) != 2 || swapped[1] != "least_inflight" {
		t.Errorf("after Install: active %s@%d, swaps %v", h.Active().Name(), h.Status().Version, swapped)
	}
	if _, err := h.Prepare("bad", "function score( return 1 end", 0); err == nil {
		t.Error("Prepare accepted a syntax error")
	}
}

// A policy that HostOptions.Install refuses is not swapped in: Load and
// Install fail with its error, the last good policy keeps serving and the
// status counts the failure.
func TestHostInstallRefused(t *testing.T) {
	refuse := errors.New("the scheduler cannot take it")
	var refusing bool
	var committed []string
	h := NewHost(HostOptions{Install: func(p *Policy) (func(), error) {
		if refusing {
			return nil, refuse
		}
		return func() { committed = append(committed, p.Name()) }, nil
	}})
	if _, err := h.LoadBuiltin("round_robin"); err != nil {
		t.Fatal(err)
	}
	refusing = true
	if _, err := h.LoadBuiltin("least_inflight"); !errors.Is(err, refuse) {
		t.Fatalf("Load = %v, want the Install error", err)
	}
	st := h.Status()
	if h.Active().Name() != "round_robin" || st.OK || st.Active != "round_robin" || st.Failures != 1 || st.Error != refuse.Error() {
		t.Fatalf("after a refused Load: active %s, status %+v", h.Active().Name(), st)
	}
	src, _ := Builtin("sticky")
	p, err := h.Prepare("sticky", src, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Install(p); !errors.Is(err, refuse) {
		t.Fatalf("Install = %v, want the Install error", err)
	}
	if st := h.Status(); h.Active().Name() != "round_robin" || st.Failures != 2 || st.Version != 0 {
		t.Fatalf("after a refused Install: active %s, status %+v", h.Active().Name(), st)
	}
	if len(committed) != 1 || committed[0] != "round_robin" {
		t.Errorf("committed %v, want only round_robin", committed)
	}
}

// A failed reload followed by the serving source again says the failure is
// over (the file watcher's last word would otherwise stay the failure).
func TestHostSaysWhenTheServingSourceIsBack(t *testing.T) {
	var buf strings.Builder
	h := NewHost(HostOptions{Options: testOptions, Log: slog.New(slog.NewTextHandler(&buf, nil))})
	src := "function score(a) return 1 end"
	if _, err := h.Load("my", src); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Load("my", "function score(a)"); err == nil {
		t.Fatal("a syntax error loaded")
	}
	if _, err := h.Load("my", src); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "policy source is the serving policy again") || !h.Status().OK {
		t.Fatalf("no word that the failure is over (status %+v):\n%s", h.Status(), buf.String())
	}
}
