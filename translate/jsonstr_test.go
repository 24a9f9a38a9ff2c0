package translate

import (
	"encoding/json"
	"testing"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "line\nfeed\r\t", "\x00\x1f", "ünïcødé 世界", "bad\xffutf8", "</script>"} {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: invalid JSON %s: %v", s, b, err)
		}
		want := s
		if s == "bad\xffutf8" {
			want = "bad\ufffdutf8"
		}
		if got != want {
			t.Fatalf("round trip %q → %s → %q", s, b, got)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("hello \"world\"\n\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("invalid JSON for %q: %s", s, b)
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendString(buf[:0], "The model `gpt-4.1-mini` does not exist or you do not have access to it.")
	}
}
