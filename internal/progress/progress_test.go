package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// Off a terminal there is no bar: New returns nil, whose methods do
// nothing, and its Writer is the writer given, so lines stay plain.
func TestNoTerminalNoBar(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, 10, "work")
	if b != nil {
		t.Fatalf("New on a buffer returned a bar")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if New(f, 10, "work") != nil {
		t.Fatalf("New on a regular file returned a bar")
	}
	b.Add(3)
	b.Describe("x")
	if w := b.Writer(&buf); w != &buf {
		t.Fatalf("a nil bar's Writer is %T, want the writer given", w)
	}
	b.Writer(&buf).Write([]byte("a line\n"))
	b.Finish()
	if buf.String() != "a line\n" {
		t.Fatalf("wrote %q, want only the line", buf.String())
	}
}

// On a terminal, lines written through Writer appear above the bar, the bar
// shows the count and clears itself when full; later lines go straight through.
func TestBarLines(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, 4, "runs")
	w := b.Writer(&buf)
	b.Add(1)
	w.Write([]byte("first ")) // a partial line waits for its end
	if strings.Contains(buf.String(), "first") {
		t.Fatalf("a partial line was written: %q", buf.String())
	}
	w.Write([]byte("run done\nsecond run done\n"))
	out := buf.String()
	for _, want := range []string{"first run done\n", "second run done\n", "runs", "(1/4"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q: %q", want, out)
		}
	}
	if strings.LastIndex(out, "(1/4") < strings.Index(out, "second run done") {
		t.Errorf("the bar was not drawn again under the lines: %q", out)
	}
	b.Add(3)
	tail := buf.String()[strings.LastIndex(buf.String(), "(1/4"):]
	if !strings.HasSuffix(tail, strings.Repeat(" ", 20)+"\r") {
		t.Errorf("a full bar is not cleared at once: ends %q", tail)
	}
	b.Finish()
	buf.Reset()
	w.Write([]byte("after\n"))
	b.Add(1)
	if buf.String() != "after\n" {
		t.Errorf("after Finish: %q, want the line alone", buf.String())
	}
}
