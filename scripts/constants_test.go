package scripts

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A source with more distinct constants than MaxConstants is refused
// before it is compiled, with its line: 40,000 of them took seconds of CPU
// to compile through the admin API (issue 16, finding 10). The shipped
// policies are far below the bound.
func TestConstantsBounded(t *testing.T) {
	for _, kind := range []string{"number", "string", "field"} {
		var b strings.Builder
		b.WriteString("function score(a, now) return 1 end\nlocal t = {\n")
		for i := range 20_000 {
			switch kind {
			case "number":
				b.WriteString(strconv.Itoa(100_000 + 7*i))
			case "string":
				b.WriteString(`"s` + strconv.Itoa(i) + `"`)
			case "field":
				b.WriteString("f" + strconv.Itoa(i) + " = 1")
			}
			b.WriteString(",\n")
		}
		b.WriteString("}\n")
		_, err := Compile("many", b.String(), Options{})
		var pe *Error
		if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) || pe.Line < MaxConstants-10 || pe.Line > MaxConstants+3 || !strings.Contains(err.Error(), "distinct names, numbers and strings") {
			t.Errorf("%s constants: %v, want a syntax error near line %d (the first constant past the bound)", kind, err, MaxConstants)
		}
	}
	// Repeats do not count: the same constants 10,000 times compile. The
	// wall-clock backstop is raised: building the 30,000-entry table can
	// take over the default 1 s on a loaded machine under -race, and
	// this test is about the constant bound, not the load budget.
	src := "function score(a, now) return 1 end\nlocal t = {" + strings.Repeat("12345, 'x', y, ", 10_000) + "}\n"
	if _, err := Compile("repeats", src, Options{LoadTimeout: time.Minute}); err != nil {
		t.Fatalf("repeated constants: %v", err)
	}
	for _, name := range Builtins() {
		src, _ := Builtin(name)
		if err := checkConstants(name, src); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}

// BenchmarkCompileConstants is the compile cost of a source at
// MaxConstants distinct constants, the most the admin API accepts, and the
// scan that refuses one past it (docs/benchmarks.md).
func BenchmarkCompileConstants(b *testing.B) {
	var src strings.Builder
	src.WriteString("function score(a, now) return 1 end\nlocal t = {\n")
	for i := range MaxConstants - 8 {
		src.WriteString(strconv.Itoa(100_000+7*i) + ",\n")
	}
	src.WriteString("}\n")
	b.Run("compile", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Compile("bound", src.String(), Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	over := src.String() + "local u = {" + strings.Repeat("1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, ", 2) + "}\n"
	b.Run("refuse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkConstants("over", over); err == nil {
				b.Fatal("not refused")
			}
		}
	})
}
