package translate

import (
	"bytes"
	"testing"
)

func TestDepthExceeds(t *testing.T) {
	cases := []struct {
		in    string
		limit int
		want  bool
	}{
		{`{"a":[1,{"b":2}]}`, 3, false},
		{`{"a":[1,{"b":2}]}`, 2, true},
		{`{"a":"[[[[[[[[[["}`, 1, false},
		{`{"a":"\"[[[["}`, 1, false},
		{`[[[`, 2, true},
		{``, 0, false},
	}
	for _, c := range cases {
		if got := DepthExceeds([]byte(c.in), c.limit); got != c.want {
			t.Errorf("DepthExceeds(%q, %d) = %v", c.in, c.limit, got)
		}
	}
	if !DepthExceeds(bytes.Repeat([]byte("["), 16<<20), 512) {
		t.Error("16 MiB of [ not caught")
	}
}
