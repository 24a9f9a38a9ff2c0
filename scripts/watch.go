package scripts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a Watcher waits for a policy file to stop
// changing before it reloads it (editors write a file in several steps).
const DefaultDebounce = 150 * time.Millisecond

// Watcher follows the active policy's file in a policies directory
// (policies.dir, --policy-dir) and reloads it into a Host when it changes.
// The active policy is named NAME and lives in DIR/NAME.lua; when that file
// does not exist, the built-in policy NAME is loaded instead, so an operator
// overrides a shipped policy by saving a file of the same name and returns
// to it by deleting the file.
//
// A Watcher is safe for concurrent use. Run does the watching; its caller
// owns the goroutine and stops it by cancelling the context.
type Watcher struct {
	host     *Host
	dir      string
	log      *slog.Logger
	debounce time.Duration

	mu     sync.Mutex
	active string
	paused atomic.Bool
}

// NewWatcher returns a watcher of dir for the policy named active. log may be nil.
func NewWatcher(h *Host, dir, active string, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{host: h, dir: dir, log: log, debounce: DefaultDebounce, active: active}
}

// Active returns the name of the policy the watcher follows.
func (w *Watcher) Active() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active
}

// SetActive makes name the followed policy and loads it.
func (w *Watcher) SetActive(name string) (*Policy, error) {
	w.mu.Lock()
	w.active = name
	w.mu.Unlock()
	return w.Load()
}

// Load reads the active policy — DIR/NAME.lua, or the built-in NAME when
// the file does not exist — and loads it into the host (see Host.Load).
func (w *Watcher) Load() (*Policy, error) {
	name := w.Active()
	src, err := ReadSource(name, filepath.Join(w.dir, name+".lua"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if builtin, ok := Builtin(name); ok {
			return w.host.Load(name, builtin)
		}
		return nil, fmt.Errorf("policy %q: no file %s.lua in %s and no such built-in policy", name, name, w.dir)
	case err != nil:
		var pe *Error
		if errors.As(err, &pe) {
			w.host.refuse(pe)
			return nil, pe
		}
		return nil, fmt.Errorf("policy %q: %w", name, err)
	}
	return w.host.Load(name, src)
}

// ReadSource reads the policy file at path as policy name's source,
// reading no more than MaxSourceBytes+1 bytes: a larger file is refused
// with an *Error (as Compile refuses a larger source) without being read
// whole.
func ReadSource(name, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSourceBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxSourceBytes {
		return "", &Error{Policy: name, Kind: ErrSyntax, Msg: fmt.Sprintf("the source is over %d bytes; a policy has at most %d", MaxSourceBytes, MaxSourceBytes)}
	}
	return string(b), nil
}

// Run watches the directory until ctx is cancelled, reloading the active
// policy after its file is written, created, renamed or removed and has been
// quiet for the debounce interval. Reload failures are reported by the Host
// (status, log) and leave the last good policy serving. Run returns nil when
// ctx is cancelled, or an error if the directory cannot be watched.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy watcher: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(w.dir); err != nil {
		return fmt.Errorf("policy watcher: watch %s: %w", w.dir, err)
	}
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			if w.relevant(ev) {
				quiet.Reset(w.debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.log.Warn("policy watcher", "dir", w.dir, "err", err)
		case <-quiet.C:
			w.reload()
		}
	}
}

// relevant reports whether ev changed the active policy's file: a change
// to another file, or of permissions alone, loads nothing.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	return filepath.Base(ev.Name) == w.Active()+".lua" && !ev.Has(fsnotify.Chmod)
}

// reload loads the active policy, keeping the watch loop alive through any
// panic.
func (w *Watcher) reload() {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("policy reload panicked; the previous policy keeps serving", "policy", w.Active(), "panic", r)
		}
	}()
	if w.paused.Load() {
		w.log.Info("policy file changed but not loaded: a policy activated through the admin API is serving", "policy", w.Active())
		return
	}
	if _, err := w.Load(); err != nil {
		w.log.Debug("policy file reload failed", "policy", w.Active(), "err", err)
	}
}

// Pause stops file changes from loading policies (Run keeps watching), for
// when a stored policy activated through the admin API takes precedence.
func (w *Watcher) Pause() { w.paused.Store(true) }
