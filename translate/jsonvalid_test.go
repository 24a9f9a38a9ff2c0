package translate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// validWithinCases are texts at the edges of the grammar and of the depth
// limit; TestValidWithin and FuzzValidWithin's seeds share them.
var validWithinCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, `{}x`, `{} {}`, `{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{1:2}`,
	`[1,2]`, `[1,]`, `[,1]`, `[1 2]`, `[`, `]`, `{`, `}`, `[}`, `{]`, `[[]]`, `[[[]]]`, `{"a":[1,{"b":2}]}`,
	`"s"`, `"`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00G9"`, `"\u00e"`, `"\x"`, "\"\x1f\"", "\"\x7f\xff\"",
	`0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e10`, `--1`, `+1`, `1.5.5`,
	`true`, `false`, `null`, `tru`, `truex`, `nul`, `nulll`, `[true,false,null]`, `{"a":"[[[["}`, "\t\n\r{\"a\" : [ 1 , 2 ] }\r\n",
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
}

func TestValidWithin(t *testing.T) {
	for _, s := range validWithinCases {
		for _, limit := range []int{-1, 0, 1, 2, 3, 128, 512, 513} {
			want := !DepthExceeds([]byte(s), limit) && gjson.Valid(s)
			if got := ValidWithin([]byte(s), limit); got != want {
				t.Errorf("ValidWithin(%q, %d) = %v, want %v", s, limit, got, want)
			}
		}
	}
	deep := strings.Repeat("[", 512) + strings.Repeat("]", 512)
	if !ValidWithin([]byte(deep), 512) || ValidWithin([]byte(deep), 511) {
		t.Error("512 levels: want valid within 512, not within 511")
	}
	mixed := strings.Repeat(`{"a":[`, 200) + strings.Repeat(`]}`, 200)
	if !ValidWithin([]byte(mixed), 400) || ValidWithin([]byte(mixed), 399) {
		t.Error("400 mixed levels: want valid within 400, not within 399")
	}
	if ValidWithin(bytes.Repeat([]byte("["), 16<<20), 512) {
		t.Error("16 MiB of [ accepted")
	}
}

func TestValidWithinAllocs(t *testing.T) {
	b := []byte(`{"model":"m","messages":[{"role":"user","content":"hi \u00e9"}],"n":-1.5e3,"s":true}`)
	if n := testing.AllocsPerRun(100, func() { ValidWithin(b, 512) }); n != 0 {
		t.Errorf("%v allocations a call, want 0", n)
	}
}

// FuzzValidWithin checks ValidWithin against the two passes it replaces,
// DepthExceeds and gjson.ValidBytes, at several limits.
func FuzzValidWithin(f *testing.F) {
	for _, s := range validWithinCases {
		f.Add([]byte(s), uint16(2))
	}
	f.Add([]byte(`{"a":[{"b":[1,2,{"c":null}]}],"d":"\ud800"}`), uint16(3))
	f.Fuzz(func(t *testing.T, b []byte, limit uint16) {
		for _, l := range []int{int(limit % 600), 0, 1, 4, 128, 512} {
			want := !DepthExceeds(b, l) && gjson.ValidBytes(b)
			if got := ValidWithin(b, l); got != want {
				t.Fatalf("ValidWithin(%q, %d) = %v, want %v", b, l, got, want)
			}
		}
	})
}

func BenchmarkValidWithin(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	b.Run("ValidWithin", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ValidWithin(body, 512)
		}
	})
	b.Run("DepthExceeds+ValidBytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = !DepthExceeds(body, 512) && gjson.ValidBytes(body)
		}
	})
}
