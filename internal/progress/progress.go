// Package progress draws a progress bar for long command-line work (troupe
// bench, policy replay over a large log, accounts import of thousands of
// accounts) on a terminal, with github.com/schollz/progressbar. When the
// output is not a terminal (a pipe, a file, a test's buffer) there is no
// bar at all, so logs and tests stay clean: New returns nil, and every
// method of a nil *Bar does nothing, so callers never check.
package progress

import (
	"bytes"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// redraw is the least time between two draws of a bar that is only
// advancing: a loop over 100,000 requests draws about ten times a second,
// not 100,000 times.
const redraw = 100 * time.Millisecond

// Bar is a progress bar of a known number of steps on a terminal. It is
// safe for concurrent use. A nil *Bar is a valid bar that draws nothing.
type Bar struct {
	mu      sync.Mutex
	bar     *progressbar.ProgressBar
	pending int       // steps added since the last draw
	drawn   time.Time // last draw
	done    bool
}

// New returns a bar of total steps described by desc, drawn on w, or nil
// (no bar) when w is not a terminal, TERM is "dumb", or total < 1.
func New(w io.Writer, total int, desc string) *Bar {
	if total < 1 || !IsTerminal(w) || os.Getenv("TERM") == "dumb" {
		return nil
	}
	return newBar(w, total, desc)
}

// newBar is New without the terminal check (tests draw into a buffer).
func newBar(w io.Writer, total int, desc string) *Bar {
	b := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(0), // Bar throttles itself, so that Println redraws at once
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)
	return &Bar{bar: b, drawn: time.Now()}
}

// IsTerminal reports whether w is a terminal (an *os.File on a TTY).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Add advances the bar by n steps; it is drawn at most every 100 ms, and
// when it is full.
func (b *Bar) Add(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.pending += n
	if time.Since(b.drawn) >= redraw || b.bar.State().CurrentNum+int64(b.pending) >= b.bar.GetMax64() {
		b.flush()
	}
}

// Describe changes the text before the bar (what is being done now).
func (b *Bar) Describe(desc string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.bar.Describe(desc)
	}
}

// Writer returns where lines that go with the bar are written: w itself
// without a bar (nil), else a writer that puts each complete line above the
// bar, which is drawn again under it at once (after Finish, straight to w).
func (b *Bar) Writer(w io.Writer) io.Writer {
	if b == nil {
		return w
	}
	return &lines{b: b, w: w}
}

// lines is Bar.Writer's writer.
type lines struct {
	b       *Bar
	w       io.Writer
	partial []byte // the start of a line not ended yet
}

func (l *lines) Write(p []byte) (int, error) {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return l.w.Write(p)
	}
	l.partial = append(l.partial, p...)
	wrote := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		progressbar.Bprintln(b.bar, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		wrote = true
	}
	if wrote {
		b.flush()
	}
	return len(p), nil
}

// Finish removes the bar from the terminal; later calls do nothing.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	b.bar.Finish()
}

// flush draws the bar with the pending steps. b.mu is held.
func (b *Bar) flush() {
	b.bar.Add(b.pending) // draws, also with 0 (the bar shows its count)
	b.pending = 0
	b.drawn = time.Now()
}
