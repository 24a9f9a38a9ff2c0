package translate

import (
	"bytes"
	"fmt"
	"math/rand/v2"
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

// BenchmarkValidWithin: a small Chat answer (the gateway benchmarks'), a
// small Chat request and a 4 KiB one, by ValidWithin, by the two passes it
// replaced, and by ValidWithinKeys (the gateway's pass over every request
// body, which also looks for a repeated key).
func BenchmarkValidWithin(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	request := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You are a helpful assistant. ", 70) +
		`"},{"role":"user","content":"` + strings.Repeat("Summarise the text below.\n", 70) + `"}],"max_tokens":256,"stream":false}`)
	for _, c := range []struct {
		name string
		body []byte
	}{{"answer", answer}, {"request", []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`)}, {"request4k", request}} {
		b.Run(c.name+"/ValidWithin", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ValidWithin(c.body, 512)
			}
		})
		b.Run(c.name+"/DepthExceeds+ValidBytes", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = !DepthExceeds(c.body, 512) && gjson.ValidBytes(c.body)
			}
		})
		b.Run(c.name+"/ValidWithinKeys", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ValidWithinKeys(c.body, 512)
			}
		})
	}
}

// TestValidWithinKeys: validity as ValidWithin's, and a repeated key found
// at any depth, within objects of more keys than the short scan holds too,
// keys compared unescaped. The gateway's FuzzRepeatedKeys checks it
// against duplicateKeyPath.
func TestValidWithinKeys(t *testing.T) {
	many := func(n int, extra string) string {
		var sb strings.Builder
		sb.WriteString("{")
		for i := range n {
			fmt.Fprintf(&sb, `"k%d":%d,`, i, i)
		}
		sb.WriteString(extra + `}`)
		return sb.String()
	}
	for s, want := range map[string]bool{
		`{"a":1,"b":2}`: false, `{"a":1,"a":2}`: true, `{"a":{"a":1},"b":[{"a":1},{"a":2}]}`: false,
		`{"a":[{"x":1,"y":{"z":[1,{"q":1,"q":2}]}}]}`: true, `[{"a":1},{"a":1}]`: false, `{"a":{},"b":{},"a":[]}`: true,
		`{"a":1,"\u0061":2}`: true, `{"a\"":1,"a\u0022":2}`: true, `{"\ud800":1,"\udbff":2}`: true, `{"é":1,"\u00e9":2}`: true,
		`{"a":{"b":1},"c":{"b":1}}`: false, `"x"`: false, `[]`: false, `{}`: false,
		many(40, `"k3":0`): true, many(40, `"x":{"k3":1,"k3":2}`): true, many(40, `"x":{"k3":1},"y":[{"k5":1}]`): false,
		`{"a":` + many(40, `"z":1`) + `,"b":` + many(40, `"z":1`) + `}`: false,
	} {
		valid, repeats := ValidWithinKeys([]byte(s), 512)
		if !valid || repeats != want {
			t.Errorf("ValidWithinKeys(%s) = %v, %v; want true, %v", s, valid, repeats, want)
		}
	}
	for _, s := range validWithinCases {
		valid, _ := ValidWithinKeys([]byte(s), 3)
		if want := ValidWithin([]byte(s), 3); valid != want {
			t.Errorf("ValidWithinKeys(%q, 3) valid %v, want %v", s, valid, want)
		}
	}
	b := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`)
	if n := testing.AllocsPerRun(100, func() { ValidWithinKeys(b, 512) }); n != 0 {
		t.Errorf("%v allocations a call, want 0", n)
	}
}

// validString's word scan, which jumps to the first special byte of a word
// by its lowest flag, agrees with a byte-at-a-time scan (validStringBytes)
// on strings of bytes near the flags' edges: controls, '"', '\\', 0x1f,
// 0x20, 0x21, 0x7f, 0x80, 0xff and escapes, at every offset in a word.
func TestValidStringMatchesBytewise(t *testing.T) {
	alphabet := []byte("\x00\x1f\x20\x21\"\\\x5b\x5d\x7f\x80\xa2\xffaZ0/ubnu")
	rng := rand.New(rand.NewPCG(5, 6))
	b := make([]byte, 0, 64)
	for range 1_000_000 {
		b = b[:0]
		for range rng.IntN(40) {
			if rng.IntN(3) == 0 {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			} else {
				b = append(b, 'a'+byte(rng.IntN(26)))
			}
		}
		gi, gok := validString(b, 0)
		wi, wok := validStringBytes(b, 0)
		if gi != wi || gok != wok {
			t.Fatalf("validString(%q) = %d, %v; byte at a time %d, %v", b, gi, gok, wi, wok)
		}
	}
}

// validStringBytes is validString a byte at a time.
func validStringBytes(b []byte, i int) (int, bool) {
	for {
		for i < len(b) && plainStringByte[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 5
			default:
				return i, false
			}
		default:
			return i, false
		}
	}
}
