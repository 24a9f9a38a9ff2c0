package actors

import (
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// The interner hands every caller the same copy of equal base URLs and
// lists, keeps an empty list as it was, and without an interner each
// caller gets a copy of its own (as every account did before).
func TestInterner(t *testing.T) {
	in := &interner{}
	u1, u2 := strings.Clone("http://127.0.0.1:1/v1"), strings.Clone("http://127.0.0.1:1/v1")
	a, b := in.str(u1), in.str(u2)
	if a != u1 || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("str: %q and %q are not one copy", a, b)
	}
	l1, l2 := []string{"m1", "m2"}, []string{strings.Clone("m1"), strings.Clone("m2")}
	s1, s2 := in.list(l1), in.list(l2)
	if !slices.Equal(s1, l1) || &s1[0] != &s2[0] || cap(s1) != len(s1) {
		t.Fatalf("list: %v (cap %d) and %v are not one shared slice", s1, cap(s1), s2)
	}
	if &s1[0] == &l1[0] {
		t.Fatal("list returned the caller's slice, which the caller may write")
	}
	if other := in.list([]string{"m1"}); len(other) != 1 || &other[0] == &s1[0] {
		t.Fatalf("list: a different list shares %v", other)
	}
	if got := in.list(nil); got != nil {
		t.Fatalf("list(nil) = %#v", got)
	}
	if got := in.list([]string{}); got == nil || len(got) != 0 {
		t.Fatalf("list(empty, not nil) = %#v, want it unchanged", got)
	}
	var none *interner
	if c := none.list(l1); !slices.Equal(c, l1) || &c[0] == &l1[0] {
		t.Fatalf("nil interner: %v is not a copy", c)
	}
	if none.str(u1) != u1 {
		t.Fatal("nil interner changed a string")
	}
}
