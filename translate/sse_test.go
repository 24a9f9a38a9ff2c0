package translate

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// ev is an Event copied into strings; nil fields become "<nil>" so that an
// absent field and an empty one differ.
type ev struct {
	Name, Data, ID, Retry string
	Comment               string // set for emitted comments
}

const absent = "<nil>"

func str(b []byte) string {
	if b == nil {
		return absent
	}
	return string(b)
}

// data returns the expected copy of an unnamed event with only data.
func data(d string) ev { return ev{Name: absent, Data: d, ID: absent, Retry: absent} }

// named returns the expected copy of a named event.
func named(name, d string) ev { return ev{Name: name, Data: d, ID: absent, Retry: absent} }

// comment returns the expected copy of an emitted comment.
func comment(text string) ev {
	return ev{Name: absent, Data: absent, ID: absent, Retry: absent, Comment: text}
}

// collect reads every event from r. raws holds a copy of each Raw.
func collect(t testing.TB, r io.Reader, maxEvent int, emit bool) (evs []ev, raws []string, comments int64, err error) {
	t.Helper()
	s := NewScanner(r, maxEvent)
	s.EmitComments(emit)
	for {
		e, err := s.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return evs, raws, s.Comments(), err
		}
		if s.IsComment() {
			if e.Name != nil || e.Data != nil || e.ID != nil || e.Retry != nil {
				t.Fatalf("comment came with a non-zero Event %+v", e)
			}
			evs = append(evs, comment(string(s.Comment())))
		} else {
			if s.Comment() != nil {
				t.Fatalf("Comment() = %q after an event", s.Comment())
			}
			evs = append(evs, ev{Name: str(e.Name), Data: str(e.Data), ID: str(e.ID), Retry: str(e.Retry)})
		}
		raws = append(raws, string(s.Raw()))
	}
}

// readers returns the ways a test input is fed to the scanner; every one must
// give the same events.
func readers(in string) map[string]func() io.Reader {
	return map[string]func() io.Reader{
		"whole":   func() io.Reader { return strings.NewReader(in) },
		"onebyte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(in)) },
		"dataerr": func() io.Reader { return iotest.DataErrReader(strings.NewReader(in)) },
		"halves":  func() io.Reader { return iotest.HalfReader(strings.NewReader(in)) },
	}
}

func TestScanner(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		emit     bool
		want     []ev
		raws     []string // checked with the "whole" reader when set
		comments int64
	}{
		{name: "empty", in: "", want: nil},
		{name: "only blank lines", in: "\n\n\r\n\r", want: nil},
		{
			name: "LF", in: "event: a\ndata: x\n\nevent: b\ndata: y\n\n",
			want: []ev{named("a", "x"), named("b", "y")},
			raws: []string{"event: a\ndata: x\n\n", "event: b\ndata: y\n\n"},
		},
		{
			name: "CRLF", in: "event: a\r\ndata: x\r\n\r\nevent: b\r\ndata: y\r\n\r\n",
			want: []ev{named("a", "x"), named("b", "y")},
			raws: []string{"event: a\r\ndata: x\r\n\r\n", "event: b\r\ndata: y\r\n\r\n"},
		},
		{
			name: "lone CR", in: "event: a\rdata: x\r\revent: b\rdata: y\r\r",
			want: []ev{named("a", "x"), named("b", "y")},
			raws: []string{"event: a\rdata: x\r\r", "event: b\rdata: y\r\r"},
		},
		{
			name: "mixed line ends", in: "event: a\r\ndata: x\rdata: y\n\r\ndata: z\r\r\n",
			want: []ev{named("a", "x\ny"), data("z")},
		},
		{
			name: "multi-line data", in: "data: a\ndata: b\ndata: c\n\n",
			want: []ev{data("a\nb\nc")},
		},
		{
			name: "multi-line data with empty lines", in: "data\ndata:\ndata: \ndata: x\ndata:\n\n",
			want: []ev{data("\n\n\nx\n")},
		},
		{
			name: "data without space", in: "data:x\n\ndata:  two spaces\n\ndata:\ttab\n\n",
			want: []ev{data("x"), data(" two spaces"), data("\ttab")},
		},
		{
			name: "colons in value", in: `data: {"a":"b:c"}` + "\n\n",
			want: []ev{data(`{"a":"b:c"}`)},
		},
		{
			name: "field without colon", in: "data\n\nevent\ndata: x\n\n",
			want: []ev{data(""), named("", "x")},
		},
		{
			name: "unknown fields ignored", in: "foo: bar\nbaz\ndata: x\nDATA: y\nEvent: z\n\n",
			want: []ev{data("x")},
		},
		{
			name: "no data, no dispatch", in: "event: a\n\nid: 1\n\nretry: 10\n\nevent: b\ndata: x\n\n",
			want: []ev{named("b", "x")},
			raws: []string{"event: b\ndata: x\n\n"},
		},
		{
			name: "name does not carry over", in: "event: a\ndata: 1\n\ndata: 2\n\n",
			want: []ev{named("a", "1"), data("2")},
		},
		{
			name: "last event field wins", in: "event: a\nevent: b\ndata: 1\n\n",
			want: []ev{named("b", "1")},
		},
		{
			name: "id and retry", in: "id: 42\nretry: 1500\ndata: x\n\n",
			want: []ev{{Name: absent, Data: "x", ID: "42", Retry: "1500"}},
		},
		{
			name: "empty id", in: "id\ndata: x\n\n",
			want: []ev{{Name: absent, Data: "x", ID: "", Retry: absent}},
		},
		{
			name: "invalid id and retry ignored", in: "id: a\x00b\nretry: 12a\nretry:\ndata: x\n\n",
			want: []ev{data("x")},
		},
		{
			name: "EOF without blank line", in: "event: a\ndata: x",
			want: []ev{named("a", "x")},
			raws: []string{"event: a\ndata: x"},
		},
		{
			name: "EOF after one line end", in: "data: x\ndata: y\n",
			want: []ev{data("x\ny")},
		},
		{
			name: "EOF after CR", in: "data: x\r",
			want: []ev{data("x")},
		},
		{
			name: "EOF in an undispatchable block", in: "data: x\n\nevent: a",
			want: []ev{data("x")},
		},
		{
			name: "comments skipped", in: ": ping\n\n:\ndata: x\n: inside\ndata: y\n\n: bye\n",
			want:     []ev{data("x\ny")},
			raws:     []string{"data: x\n: inside\ndata: y\n\n"},
			comments: 4,
		},
		{
			name: "comments emitted", in: ": ping\n\n:\ndata: x\n: inside\ndata: y\n\n:  bye\r\n", emit: true,
			want:     []ev{comment("ping"), comment(""), data("x\ny"), comment(" bye")},
			raws:     []string{": ping\n", ":\n", "data: x\n: inside\ndata: y\n\n", ":  bye\r\n"},
			comments: 4,
		},
		{
			name: "comment at EOF emitted", in: "data: x\n\n: tail", emit: true,
			want:     []ev{data("x"), comment("tail")},
			comments: 1,
		},
		{
			name: "BOM", in: "\xEF\xBB\xBFdata: x\n\n",
			want: []ev{data("x")},
			raws: []string{"data: x\n\n"},
		},
		{
			name: "BOM only once", in: "\xEF\xBB\xBFdata: x\n\n\xEF\xBB\xBFdata: y\n\n",
			want: []ev{data("x")},
		},
		{
			name: "BOM prefix only", in: "\xEF\xBB",
			want: nil,
		},
		{
			name: "UTF-8 untouched", in: "event: 名前\ndata: héllo 世界 🎉\ndata: \xff\xfe\n\n",
			want: []ev{named("名前", "héllo 世界 🎉\n\xff\xfe")},
		},
		{
			name: "leading blank lines", in: "\n\r\n\rdata: x\n\n",
			want: []ev{data("x")},
			raws: []string{"data: x\n\n"},
		},
		{
			name: "many blank lines between", in: "data: x\n\n\n\n\ndata: y\n\n",
			want: []ev{data("x"), data("y")},
			raws: []string{"data: x\n\n", "data: y\n\n"},
		},
		{
			name: "chat DONE", in: "data: {\"a\":1}\n\ndata: [DONE]\n\n",
			want: []ev{data(`{"a":1}`), data("[DONE]")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for rname, mk := range readers(tc.in) {
				got, raws, comments, err := collect(t, mk(), 0, tc.emit)
				if err != nil {
					t.Fatalf("%s: error %v", rname, err)
				}
				if !equalEvents(got, tc.want) {
					t.Fatalf("%s: events\n got %q\nwant %q", rname, got, tc.want)
				}
				if comments != tc.comments {
					t.Errorf("%s: Comments() = %d, want %d", rname, comments, tc.comments)
				}
				if rname == "whole" && tc.raws != nil && !equalStrings(raws, tc.raws) {
					t.Errorf("raws\n got %q\nwant %q", raws, tc.raws)
				}
			}
		})
	}
}

func equalEvents(a, b []ev) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestScannerRawReproducesStream checks that the Raw bytes of a stream
// without comments or stray blank lines are the stream, byte for byte.
func TestScannerRawReproducesStream(t *testing.T) {
	for _, name := range []string{"responses-stream-text.sse", "chat-stream-text.sse", "anthropic-stream-text.sse"} {
		in := readTestdata(t, name)
		for rname, mk := range readers(string(in)) {
			_, raws, _, err := collect(t, mk(), 0, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(raws, ""); got != string(in) {
				t.Errorf("%s/%s: joined Raw differs from the input", name, rname)
			}
		}
		crlf := bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n"))
		_, raws, _, err := collect(t, bytes.NewReader(crlf), 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(raws, ""); got != string(crlf) {
			t.Errorf("%s (CRLF): joined Raw differs from the input", name)
		}
	}
}

func TestScannerFixtureEvents(t *testing.T) {
	in := readTestdata(t, "responses-stream-text.sse")
	evs, _, _, err := collect(t, bytes.NewReader(in), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 14 {
		t.Fatalf("got %d events, want 14", len(evs))
	}
	if evs[0].Name != "response.created" || evs[13].Name != "response.completed" {
		t.Errorf("first/last = %q/%q", evs[0].Name, evs[13].Name)
	}
	for _, e := range evs {
		if !strings.HasPrefix(e.Data, `{"type":"`+e.Name+`"`) {
			t.Errorf("event %q has data %.60q", e.Name, e.Data)
		}
	}
}

func TestScannerLargeLines(t *testing.T) {
	const mib = 1 << 20
	big := strings.Repeat("x", mib)
	bigUTF8 := strings.Repeat("é", mib/2) // 1 MiB of 2-byte runes
	in := "event: small\ndata: 1\n\nevent: big\ndata: " + big + "\n\ndata: " + bigUTF8 + "\ndata: " + big + "\n\ndata: end\n\n"
	want := []ev{named("small", "1"), named("big", big), data(bigUTF8 + "\n" + big), data("end")}
	for _, rname := range []string{"whole", "halves"} {
		got, _, _, err := collect(t, readers(in)[rname](), 3*mib, false)
		if err != nil {
			t.Fatalf("%s: %v", rname, err)
		}
		if !equalEvents(got, want) {
			t.Fatalf("%s: large events differ", rname)
		}
	}
	// Exactly at the limit: the event's raw bytes are maxEvent bytes.
	exact := "data: " + big + "\n\n"
	got, _, _, err := collect(t, strings.NewReader(exact+"data: next\n\n"), len(exact), false)
	if err != nil || len(got) != 2 || got[0].Data != big {
		t.Fatalf("event of exactly maxEvent bytes: %d events, err %v", len(got), err)
	}
}

func TestScannerTooLarge(t *testing.T) {
	const mib = 1 << 20
	big := strings.Repeat("x", mib)
	for _, tc := range []struct {
		name, in string
		max      int
		before   int // events returned before the error
	}{
		{"one long line", "data: ok\n\ndata: " + big + "\n\ndata: after\n\n", mib, 1},
		{"one byte over", "data: " + big[:100] + "\n\n", len("data: \n\n") + 99, 0},
		{"long line without end", "data: " + big, mib, 0},
		{"many lines", strings.Repeat("data: "+big[:1000]+"\n", 2000) + "\n", mib, 0},
		{"long event name", "event: " + big + "\ndata: x\n\n", mib / 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScanner(strings.NewReader(tc.in), tc.max)
			n := 0
			var err error
			for {
				if _, err = s.Next(); err != nil {
					break
				}
				n++
			}
			if !errors.Is(err, ErrEventTooLarge) || n != tc.before {
				t.Fatalf("after %d events: %v, want %d events then ErrEventTooLarge", n, err, tc.before)
			}
			if _, err2 := s.Next(); err2 != err {
				t.Errorf("error not sticky: %v", err2)
			}
			if cap(s.buf) > tc.max {
				t.Errorf("buffer grew to %d bytes, past the %d limit", cap(s.buf), tc.max)
			}
		})
	}
}

// TestScannerLongCommentStream checks that comments between events do not
// accumulate in the buffer: a stream of only keep-alives never hits the limit.
func TestScannerLongCommentStream(t *testing.T) {
	in := strings.Repeat(": keep-alive\n\n", 10000) + "data: x\n\n"
	got, _, comments, err := collect(t, strings.NewReader(in), 256, false)
	if err != nil || len(got) != 1 || comments != 10000 {
		t.Fatalf("got %d events, %d comments, err %v", len(got), comments, err)
	}
}

func TestScannerReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: 1\n\ndata: partial"), iotest.ErrReader(boom))
	s := NewScanner(r, 0)
	if e, err := s.Next(); err != nil || string(e.Data) != "1" {
		t.Fatalf("first event: %q %v", e.Data, err)
	}
	if _, err := s.Next(); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the reader's error (and the partial event dropped)", err)
	}
	if _, err := s.Next(); !errors.Is(err, boom) {
		t.Fatalf("error not sticky: %v", err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestScannerNoProgress(t *testing.T) {
	if _, err := NewScanner(emptyReader{}, 0).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("got %v, want io.ErrNoProgress", err)
	}
}

func TestScannerReset(t *testing.T) {
	s := NewScanner(strings.NewReader("data: a\n\n: c\n"), 0)
	s.EmitComments(true)
	if e, err := s.Next(); err != nil || string(e.Data) != "a" {
		t.Fatal(e, err)
	}
	s.Next()
	s.Next() // EOF
	s.Reset(strings.NewReader("data: b\n\n"))
	if s.Comments() != 0 {
		t.Errorf("Comments() = %d after Reset", s.Comments())
	}
	if e, err := s.Next(); err != nil || string(e.Data) != "b" {
		t.Fatalf("after Reset: %q %v", e.Data, err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("got %v, want EOF", err)
	}
}

// TestEventSlicesClipped checks that appending to a returned slice cannot
// overwrite the scanner's buffer.
func TestEventSlicesClipped(t *testing.T) {
	s := NewScanner(strings.NewReader("event: a\ndata: x\n\ndata: y\n\n"), 0)
	e, _ := s.Next()
	_ = append(e.Name, "ZZZZZZZZ"...)
	_ = append(e.Data, "ZZZZZZZZ"...)
	_ = append(s.Raw(), "ZZZZZZZZ"...)
	if e2, _ := s.Next(); string(e2.Data) != "y" {
		t.Fatalf("buffer overwritten: %q", e2.Data)
	}
}

func TestAppendEvent(t *testing.T) {
	tests := []struct {
		name, ev string
		data     string
		want     string
	}{
		{"named", "response.created", `{"a":1}`, "event: response.created\ndata: {\"a\":1}\n\n"},
		{"unnamed", "", "[DONE]", "data: [DONE]\n\n"},
		{"empty data", "x", "", "event: x\ndata:\n\n"},
		{"LF", "", "a\nb", "data: a\ndata: b\n\n"},
		{"CRLF and CR", "", "a\r\nb\rc", "data: a\ndata: b\ndata: c\n\n"},
		{"trailing LF", "", "a\n", "data: a\ndata:\n\n"},
		{"leading space kept", "", " a", "data:  a\n\n"},
		{"name cut at newline", "a\nb", "x", "event: a\ndata: x\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendEvent([]byte("prefix|"), tc.ev, []byte(tc.data)))
			if got != "prefix|"+tc.want {
				t.Fatalf("got %q, want %q", got, "prefix|"+tc.want)
			}
		})
	}
	if got := string(AppendData(nil, []byte("x"))); got != "data: x\n\n" {
		t.Errorf("AppendData = %q", got)
	}
}

func TestAppendComment(t *testing.T) {
	for in, want := range map[string]string{
		"ping":     ": ping\n",
		"":         ":\n",
		"a\nb\r\n": ": a\n: b\n:\n",
	} {
		if got := string(AppendComment(nil, in)); got != want {
			t.Errorf("AppendComment(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAppendRoundTrip(t *testing.T) {
	cases := []struct{ name, data string }{
		{"", "x"},
		{"message", ""},
		{"response.output_text.delta", `{"delta":"héllo\n世界"}`},
		{"", "line1\nline2\n\nline4\n"},
		{"a", "\n"},
		{"b", " leading and trailing "},
		{"c", ": not a comment\ndata: not a field\nevent: nope"},
		{"d", "crlf\r\ninside\rdata"},
		{"e", strings.Repeat("z", 100000)},
	}
	var stream []byte
	stream = AppendComment(stream, "hello")
	for _, c := range cases {
		stream = AppendEvent(stream, c.name, []byte(c.data))
		stream = AppendComment(stream, "keep-alive")
	}
	for rname, mk := range readers(string(stream)) {
		got, _, comments, err := collect(t, mk(), 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(cases) || comments != int64(len(cases)+1) {
			t.Fatalf("%s: %d events, %d comments", rname, len(got), comments)
		}
		for i, c := range cases {
			wantName := c.name
			if c.name == "" {
				wantName = absent
			}
			wantData := strings.ReplaceAll(strings.ReplaceAll(c.data, "\r\n", "\n"), "\r", "\n")
			if got[i].Name != wantName || got[i].Data != wantData {
				t.Errorf("%s: case %d: got %q/%.40q, want %q/%.40q", rname, i, got[i].Name, got[i].Data, wantName, wantData)
			}
		}
	}
}

// loopReader serves the same bytes forever without allocating.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

func TestScannerNextZeroAllocs(t *testing.T) {
	resp := readTestdata(t, "responses-stream-text.sse")
	multi := []byte("event: a\r\ndata: 1\r\ndata: 2\r\n: c\r\nid: 7\r\n\r\n: ping\n\n")
	for name, in := range map[string][]byte{"responses": resp, "multi-line CRLF": multi} {
		t.Run(name, func(t *testing.T) {
			s := NewScanner(&loopReader{b: in}, 0)
			for range 1000 { // let the buffers grow
				if _, err := s.Next(); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(10000, func() {
				if _, err := s.Next(); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("Next allocates %v times per event", allocs)
			}
		})
	}
}

// countingReader gives r's bytes at most chunk at a time and counts the
// reads.
type countingReader struct {
	in    []byte
	chunk int
	reads int
}

func (r *countingReader) Read(p []byte) (int, error) {
	r.reads++
	if len(r.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.chunk)], r.in)
	r.in = r.in[n:]
	return n, nil
}

// checkReady reads in through a reader that gives chunk bytes at a time
// and checks that Ready, asked before every Next after the first, tells
// exactly whether that Next reads: true means no read (a relay may gather
// the event and write it later without holding it back while the upstream
// is silent), false means a read.
func checkReady(t *testing.T, in []byte, chunk int, emit bool) {
	t.Helper()
	r := &countingReader{in: in, chunk: chunk}
	s := NewScanner(r, 1<<20)
	s.EmitComments(emit)
	for first := true; ; first = false {
		ready, reads := s.Ready(), r.reads
		_, err := s.Next()
		if !first && ready != (r.reads == reads) {
			t.Fatalf("chunk %d, comments %v: Ready %v, yet Next read %d times (input %q, left %q)", chunk, emit, ready, r.reads-reads, in, r.in)
		}
		if err != nil {
			if !s.Ready() {
				t.Fatalf("Ready false after Next failed with %v", err)
			}
			return
		}
	}
}

// TestScannerReady: Ready is true exactly when the next event is in hand,
// whatever the line ends, comments, blank lines and read sizes.
func TestScannerReady(t *testing.T) {
	inputs := []string{
		"data: a\n\ndata: b\n\n",
		"event: x\ndata: a\n\n: ping\n\nid: 1\n\ndata: b\r\n\r\ndata:c\r\rdata\n\n",
		"data: a\n\nevent: only a name\n\n\n\ndata: b",
		": c1\n: c2\ndata: a\n: inside\n\n",
		"\xEF\xBB\xBFdata: x\r\n\r\ndatax: y\n\ndata: z\r\n\r\n",
		"retry: 5\nid: 2\ndata: 1\ndata: 2\n\n" + strings.Repeat("data: long line "+strings.Repeat("x", 500)+"\n\n", 20),
	}
	for _, name := range []string{"chat-stream-text.sse", "responses-stream-text.sse"} {
		inputs = append(inputs, string(readTestdata(t, name)))
	}
	for _, in := range inputs {
		for _, chunk := range []int{1, 2, 3, 7, 64, 1 << 20} {
			checkReady(t, []byte(in), chunk, false)
			checkReady(t, []byte(in), chunk, true)
		}
	}
	// Before the first Next nothing is known.
	if s := NewScanner(strings.NewReader("data: a\n\n"), 0); s.Ready() {
		t.Fatal("Ready before anything was read")
	}
}

func BenchmarkScannerNext(b *testing.B) {
	in := readTestdata(b, "responses-stream-text.sse")
	var rd bytes.Reader
	s := NewScanner(&rd, 0)
	events := 0
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(in)
		s.Reset(&rd)
		for {
			if _, err := s.Next(); err != nil {
				break
			}
			events++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

func BenchmarkAppendEvent(b *testing.B) {
	data := []byte(`{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_68d7eff9c3b8819683eb04cbeb3775d507152cb8c6ac9072","output_index":1,"content_index":0,"delta":",","logprobs":[],"obfuscation":"va6PVP8CfPATBqu"}`)
	buf := make([]byte, 0, 1024)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEvent(buf[:0], "response.output_text.delta", data)
	}
}

func FuzzScanner(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.sse"))
	for _, p := range files {
		f.Add(readTestdata(f, filepath.Base(p)))
	}
	for _, s := range []string{
		"data: x\r\n\r\n", "data: a\rdata: b\r\r", ": c\ndata\n\n", "id: 1\nretry: 2\nevent: e\ndata: d",
		"\xEF\xBB\xBFdata: x\n\n", "data:x\n\ndata:\n\n", "event: a\n\n\n\r\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, wholeRaw := fuzzRun(t, bytes.NewReader(in), 1<<20, len(in))
		one, _ := fuzzRun(t, iotest.OneByteReader(bytes.NewReader(in)), 1<<20, len(in))
		if !equalEvents(whole, one) {
			t.Fatalf("whole and one-byte reads differ:\n%q\n%q", whole, one)
		}
		if !bytes.Contains(in, []byte{'\r'}) && !bytes.HasPrefix(in, utf8BOM) {
			// Without CRs the joined Raw is a subsequence of the input in order.
			rest := in
			for _, r := range wholeRaw {
				i := bytes.Index(rest, []byte(r))
				if i < 0 {
					t.Fatalf("Raw %q is not in the rest of the input", r)
				}
				rest = rest[i+len(r):]
			}
		}
		fuzzRun(t, bytes.NewReader(in), 16, len(in)) // small limit: no panic, same invariants
		for _, chunk := range []int{1, 5, len(in) + 1} {
			checkReady(t, in, chunk, false)
			checkReady(t, in, chunk, true)
		}
	})
}

// fuzzRun reads every event and checks the size invariants.
func fuzzRun(t *testing.T, r io.Reader, maxEvent, inLen int) ([]ev, []string) {
	s := NewScanner(r, maxEvent)
	s.EmitComments(true)
	var evs []ev
	var raws []string
	dataSum, rawSum := 0, 0
	for {
		e, err := s.Next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrEventTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			break
		}
		dataSum += len(e.Data)
		rawSum += len(s.Raw())
		if len(e.Data) > len(s.Raw()) {
			t.Fatalf("data %d bytes longer than its raw event %d", len(e.Data), len(s.Raw()))
		}
		if dataSum > inLen || rawSum > inLen {
			t.Fatalf("data %d / raw %d bytes exceed input %d", dataSum, rawSum, inLen)
		}
		if s.IsComment() {
			evs = append(evs, comment(string(s.Comment())))
		} else {
			evs = append(evs, ev{Name: str(e.Name), Data: str(e.Data), ID: str(e.ID), Retry: str(e.Retry)})
		}
		raws = append(raws, string(s.Raw()))
	}
	return evs, raws
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
