package scripts

import (
	"slices"
	"testing"
)

func TestBuiltinsCompileAndSelfTest(t *testing.T) {
	want := []string{"least_inflight", "quota_reset", "round_robin", "smart", "sticky", "weighted"}
	if got := Builtins(); !slices.Equal(got, want) {
		t.Fatalf("Builtins() = %v, want %v", got, want)
	}
	for _, name := range want {
		src, ok := Builtin(name)
		if !ok {
			t.Fatalf("Builtin(%q) missing", name)
		}
		p, err := Compile(name, src, testOptions)
		if err != nil {
			t.Fatalf("Compile(%s): %v", name, err)
		}
		if p.Knobs().Description == "" {
			t.Errorf("%s: no policy.description", name)
		}
		if err := SelfTest(p, SampleViews(testNow)); err != nil {
			t.Errorf("SelfTest(%s): %v", name, err)
		}
	}
	if _, ok := Builtin("../builtin"); ok {
		t.Error("Builtin accepted a path")
	}
	if _, ok := Builtin(DefaultPolicy); !ok {
		t.Error("DefaultPolicy is not shipped")
	}
}
