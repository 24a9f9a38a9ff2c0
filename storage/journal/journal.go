// Package journal keeps usage records through a storage outage. Usage wraps
// the usage writer (storage.Usage and storage.RequestLog's error events):
// a batch storage does not take — it refuses it, or has not committed it
// within AttemptTimeout — is appended to a local append-only file and
// fsynced before the write returns, and the file is written to storage,
// batch by batch, when storage takes writes again; after a restart too, as
// Open replays what it finds. While the file holds batches, new batches are
// appended behind them, so a down database costs no time per batch.
//
// Storage skips records whose request id it already holds (and error events
// whose request id and attempt it holds), so a batch that reached storage
// and the journal both — committed just as its attempt timed out — is
// stored once.
//
// # The file
//
// One file (Open's path; troupe uses {data_dir}/usage.journal, mode 0600) of
// frames: a 4-byte big-endian payload length, the payload's CRC-32C (4
// bytes, big-endian), and the payload, a JSON object {"r": [records]} or
// {"e": [error events]} (storage.UsageRecord and storage.ErrorEvent with
// their Go field names). A frame that is cut short or fails its CRC (a
// kill during the append, before its fsync) ends the file: Open truncates
// it there. Once every frame is written to storage the file is truncated
// to zero bytes. It is bounded by MaxBytes: a batch that does not fit is
// refused with ErrFull (the caller keeps it and retries), and Health
// reports the journal down, so the instance stops claiming readiness.
package journal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Defaults for the zero Options.
const (
	DefaultMaxBytes       = 1 << 30 // 1 GiB: about 3 million records
	DefaultAttemptTimeout = time.Second
	DefaultRetryInterval  = time.Second
	DefaultReplayTimeout  = 30 * time.Second
)

// ErrFull is returned (wrapped) by InsertUsage and InsertErrorEvents when
// storage did not take a batch and the journal has no room for it.
var ErrFull = errors.New("journal: full")

// ErrClosed is returned by InsertUsage and InsertErrorEvents when a batch
// needs the journal after Close, and by WaitDrained when the journal was
// closed before it was drained (what it holds is written after the next
// Open).
var ErrClosed = errors.New("journal: closed")

// Writer is what Usage writes to: storage.Usage's InsertUsage and
// storage.RequestLog's InsertErrorEvents, both skipping what is already
// stored.
type Writer interface {
	InsertUsage(ctx context.Context, recs []storage.UsageRecord) error
	InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) error
}

// Options configure a Usage. The zero value is valid.
type Options struct {
	// MaxBytes bounds the file. Default DefaultMaxBytes.
	MaxBytes int64
	// AttemptTimeout bounds a direct write to storage: a batch not
	// committed by then is journalled (and the attempt cancelled). It bounds
	// how long a batch stays only in memory when storage hangs. Default
	// DefaultAttemptTimeout.
	AttemptTimeout time.Duration
	// RetryInterval is how often journalled batches are tried again while
	// storage refuses them. Default DefaultRetryInterval.
	RetryInterval time.Duration
	// ReplayTimeout bounds the write of one journalled batch. Default
	// DefaultReplayTimeout.
	ReplayTimeout time.Duration
	// Logger receives one warning when journalling starts, one line when
	// the journal is written to storage, and errors. Default slog.Default().
	Logger *slog.Logger
}

// Stats is a snapshot of a Usage's state and lifetime counters, for
// metrics: the first three fields as gauges, the rest as counters.
type Stats struct {
	Pending    int64  // records and error events in the journal, not yet written to storage
	Bytes      int64  // size of the journal file
	Full       bool   // the last batch that needed the journal did not fit
	Journalled uint64 // records and error events appended to the journal
	Replayed   uint64 // journalled records and error events written to storage
	Rejected   uint64 // journalled records and error events storage refused as invalid (ErrInvalid): never writable, logged
}

// Usage is a Writer that journals what storage does not take; see the
// package documentation. It is safe for concurrent use. Close stops its
// replay and closes the file (not the Writer).
type Usage struct {
	w    Writer
	opts Options
	log  *slog.Logger
	path string

	mu      sync.Mutex // guards the file's appends and truncation, and the fields below
	f       *os.File
	size    int64     // end of the last good frame
	cursor  int64     // frames before it are written to storage
	pending int64     // records and events after cursor
	since   time.Time // when the journal last turned non-empty; zero while empty
	full    bool

	active atomic.Bool // the journal holds frames: batches go behind them
	wake   chan struct{}
	// empty is closed while the journal is drained (nothing pending, the
	// file truncated); a fresh one is made, under mu, when it turns
	// non-empty. WaitDrained waits on it.
	empty chan struct{}
	// stopped is closed by Close, after the replay has stopped.
	stopped chan struct{}

	journalled, replayed, rejected atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup
	closed sync.Once
}

var (
	_ Writer                 = (*Usage)(nil)
	_ storage.HealthReporter = (*Usage)(nil)
)

// frame is a journal frame's payload: one batch of records or of events.
type frame struct {
	Records []storage.UsageRecord `json:"r,omitempty"`
	Events  []storage.ErrorEvent  `json:"e,omitempty"`
}

func (f *frame) count() int { return len(f.Records) + len(f.Events) }

const headerSize = 8

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Open opens (creating it, 0600) the journal file at path, locks it (flock:
// an error if another process holds it), drops a torn frame at its end,
// and starts writing what it holds to w in the background.
func Open(path string, w Writer, opts Options) (*Usage, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = DefaultAttemptTimeout
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.ReplayTimeout <= 0 {
		opts.ReplayTimeout = DefaultReplayTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	f, err := openLocked(path)
	if err != nil {
		return nil, err
	}
	u := &Usage{w: w, opts: opts, log: log, path: path, f: f, wake: make(chan struct{}, 1),
		empty: make(chan struct{}), stopped: make(chan struct{})}
	close(u.empty) // recover opens a fresh one if the file holds frames
	if err := u.recover(); err != nil {
		f.Close()
		return nil, err
	}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.done.Add(1)
	go u.run()
	return u, nil
}

// recover scans the file, truncating it after its last good frame, and
// counts what it holds.
func (u *Usage) recover() error {
	st, err := u.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	var off int64
	for off < st.Size() {
		fr, n, err := u.read(off, st.Size())
		if err != nil {
			u.log.Error("usage journal: dropping a torn or corrupt end (written by a process that died during an append, before its fsync)",
				"path", u.path, "offset", off, "bytes", st.Size()-off, "err", err.Error())
			break
		}
		u.pending += int64(fr.count())
		off += n
	}
	if off != st.Size() {
		if err := u.f.Truncate(off); err != nil {
			return fmt.Errorf("journal: truncate a torn end: %w", err)
		}
		if err := u.f.Sync(); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	u.size = off
	if off > 0 {
		u.since = time.Now()
		u.active.Store(true)
		u.empty = make(chan struct{})
		u.log.Warn("usage journal: records from before the restart wait for storage", "path", u.path, "records", u.pending, "bytes", off)
		u.poke()
	}
	return nil
}

// read decodes the frame at off; end is the file's usable size.
func (u *Usage) read(off, end int64) (frame, int64, error) {
	var fr frame
	if end-off < headerSize {
		return fr, 0, io.ErrUnexpectedEOF
	}
	var h [headerSize]byte
	if _, err := u.f.ReadAt(h[:], off); err != nil {
		return fr, 0, err
	}
	n := int64(binary.BigEndian.Uint32(h[:4]))
	if n == 0 || end-off-headerSize < n {
		return fr, 0, io.ErrUnexpectedEOF
	}
	payload := make([]byte, n)
	if _, err := u.f.ReadAt(payload, off+headerSize); err != nil {
		return fr, 0, err
	}
	if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(h[4:]) {
		return fr, 0, errors.New("checksum mismatch")
	}
	if err := json.Unmarshal(payload, &fr); err != nil {
		return fr, 0, fmt.Errorf("decode: %w", err)
	}
	return fr, headerSize + n, nil
}

// InsertUsage writes recs to storage, or journals them when storage does
// not take them; nil means they are stored or journalled (fsynced). Errors:
// storage's ErrInvalid (nothing is journalled: it never could be written),
// ErrFull, or a file error.
func (u *Usage) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return u.insert(ctx, frame{Records: recs}, func(ctx context.Context) error { return u.w.InsertUsage(ctx, recs) })
}

// InsertErrorEvents is InsertUsage for error events.
func (u *Usage) InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	return u.insert(ctx, frame{Events: evs}, func(ctx context.Context) error { return u.w.InsertErrorEvents(ctx, evs) })
}

func (u *Usage) insert(ctx context.Context, fr frame, write func(context.Context) error) error {
	var cause error
	if !u.active.Load() {
		actx, cancel := context.WithTimeout(ctx, u.opts.AttemptTimeout)
		cause = write(actx)
		cancel()
		if cause == nil || errors.Is(cause, storage.ErrInvalid) {
			return cause
		}
	}
	return u.append(fr, cause)
}

// append adds fr to the journal and fsyncs it. cause is why storage did
// not take it (nil: batches already wait in the journal).
func (u *Usage) append(fr frame, cause error) error {
	payload, err := json.Marshal(&fr)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	buf := make([]byte, headerSize, headerSize+len(payload))
	binary.BigEndian.PutUint32(buf[:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(payload, crcTable))
	buf = append(buf, payload...)

	u.mu.Lock()
	defer u.mu.Unlock()
	if u.f == nil {
		return ErrClosed
	}
	if u.size+int64(len(buf)) > u.opts.MaxBytes {
		if !u.full {
			u.log.Error("usage journal full: storage is not taking usage records and the journal has no room; they wait in memory",
				"path", u.path, "bytes", u.size, "max_bytes", u.opts.MaxBytes)
		}
		u.full = true
		if cause != nil {
			return fmt.Errorf("%w (%d of %d bytes); storage: %w", ErrFull, u.size, u.opts.MaxBytes, cause)
		}
		return fmt.Errorf("%w (%d of %d bytes)", ErrFull, u.size, u.opts.MaxBytes)
	}
	if _, err := u.f.WriteAt(buf, u.size); err != nil {
		_ = u.f.Truncate(u.size)
		return fmt.Errorf("journal: append: %w", err)
	}
	if err := u.f.Sync(); err != nil {
		_ = u.f.Truncate(u.size)
		return fmt.Errorf("journal: fsync: %w", err)
	}
	u.size += int64(len(buf))
	u.full = false
	u.pending += int64(fr.count())
	u.journalled.Add(uint64(fr.count()))
	if !u.active.Load() {
		u.since = time.Now()
		u.active.Store(true)
		u.empty = make(chan struct{})
		msg := "unknown"
		if cause != nil {
			msg = cause.Error()
		}
		u.log.Warn("usage records journalled: storage did not take a batch; they are written to it when it does",
			"path", u.path, "err", msg)
		u.poke()
	}
	return nil
}

func (u *Usage) poke() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// run writes the journal to storage whenever it holds frames: at once when
// it starts to, then every RetryInterval until it is empty, until Close.
func (u *Usage) run() {
	defer u.done.Done()
	t := time.NewTicker(u.opts.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-u.ctx.Done():
			return
		case <-u.wake:
		case <-t.C:
		}
		if u.active.Load() {
			u.replay()
		}
	}
}

// replayTries is how many failures in a row a replay round takes before it
// waits for the next: a database that just restarted fails once per dead
// pooled connection before a fresh one serves.
const replayTries = 8

// replay writes the journal's frames to storage in order, from the cursor,
// until it is empty (then truncates it) or storage fails replayTries times
// in a row (the rest waits for the next round).
func (u *Usage) replay() {
	fails := 0
	for u.ctx.Err() == nil {
		u.mu.Lock()
		off, end := u.cursor, u.size
		if off == end {
			u.drained()
			u.mu.Unlock()
			return
		}
		fr, n, err := u.read(off, end)
		u.mu.Unlock()
		if err != nil {
			u.log.Error("usage journal: unreadable frame; replay stopped", "path", u.path, "offset", off, "err", err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(u.ctx, u.opts.ReplayTimeout)
		if len(fr.Records) > 0 {
			err = u.w.InsertUsage(ctx, fr.Records)
		} else {
			err = u.w.InsertErrorEvents(ctx, fr.Events)
		}
		cancel()
		switch {
		case errors.Is(err, storage.ErrInvalid):
			u.rejected.Add(uint64(fr.count()))
			u.log.Error("usage journal: storage refused a journalled batch as invalid; skipped", "records", fr.count(), "err", err.Error())
		case err != nil:
			if fails++; fails >= replayTries {
				return // storage still down: the next round retries this frame
			}
			continue
		default:
			u.replayed.Add(uint64(fr.count()))
		}
		fails = 0
		u.mu.Lock()
		u.cursor = off + n
		u.pending -= int64(fr.count())
		u.mu.Unlock()
	}
}

// drained empties the file once every frame is written. u.mu is held.
func (u *Usage) drained() {
	if err := u.f.Truncate(0); err != nil {
		u.log.Error("usage journal: truncate after replay", "path", u.path, "err", err.Error())
		return // the frames are written; a restart would write them again, harmlessly
	}
	_ = u.f.Sync()
	outage := time.Since(u.since)
	u.size, u.cursor, u.pending, u.full, u.since = 0, 0, 0, false, time.Time{}
	u.active.Store(false)
	close(u.empty)
	u.log.Info("usage journal written to storage", "path", u.path, "journalled_for", outage.Round(time.Millisecond).String(),
		"replayed_total", u.replayed.Load())
}

// WaitDrained waits until the journal is drained: it holds nothing, every
// journalled record and error event written to storage (or refused by it
// as invalid, see Stats.Rejected) and the file truncated. It returns nil at
// once when the journal is empty, also after Close, and nil when it drains
// during the call, even if later batches are journalled again before
// WaitDrained returns. Otherwise it returns ctx's error when ctx ends
// first, and ErrClosed when Close stops the replay first (or stopped it
// before the call) with records still journalled. It starts no goroutine
// and holds nothing after it returns; it is safe for concurrent use, from
// any number of callers.
//
// The journal drains only when storage takes writes: bound ctx.
func (u *Usage) WaitDrained(ctx context.Context) error {
	u.mu.Lock()
	empty := u.empty
	u.mu.Unlock()
	select {
	case <-empty:
		return nil
	default:
	}
	select {
	case <-u.stopped: // nothing drains it now: do not let a done ctx decide
		return ErrClosed
	default:
	}
	select {
	case <-empty:
		return nil
	case <-u.stopped:
		select {
		case <-empty: // drained by the replay's last round, before Close stopped it
			return nil
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns a snapshot of the state and counters.
func (u *Usage) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return Stats{
		Pending:    u.pending,
		Bytes:      u.size,
		Full:       u.full,
		Journalled: u.journalled.Load(),
		Replayed:   u.replayed.Load(),
		Rejected:   u.rejected.Load(),
	}
}

// Health reports the journal for /readyz: degraded while it holds records
// storage has not taken yet, down when it is full (usage records then wait
// in memory, and a kill would lose them).
func (u *Usage) Health() storage.Health {
	u.mu.Lock()
	defer u.mu.Unlock()
	h := storage.Health{Name: "usage_journal", Since: u.since}
	switch {
	case u.full:
		h.Down = true
		h.Detail = fmt.Sprintf("usage journal full (%d bytes): storage is not taking usage records and they wait in memory", u.size)
	case u.size > 0:
		h.Degraded = true
		h.Detail = fmt.Sprintf("%d usage records journalled, written to storage when it takes them", u.pending)
	}
	return h
}

// Close stops the replay and closes the file; what it holds is written
// after the next Open, and WaitDrained returns ErrClosed while it holds
// anything. It is idempotent.
func (u *Usage) Close() error {
	var err error
	u.closed.Do(func() {
		u.cancel()
		u.done.Wait()
		close(u.stopped)
		u.mu.Lock()
		defer u.mu.Unlock()
		err = u.f.Close()
		u.f = nil
	})
	return err
}

// LockFile takes the lock Open takes on a journal, an exclusive advisory
// lock (flock; none where flock is missing), on the file at path, created
// if missing. It is held until release. The error says the file is in use
// when another open of it (another process, or this one) holds the lock.
func LockFile(path string) (release func() error, err error) {
	f, err := openLocked(path)
	if err != nil {
		return nil, err
	}
	return f.Close, nil // closing the file releases its lock
}

// openLocked opens (creating it, 0600) the file at path for reading and
// writing and locks it (lock).
func openLocked(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: open: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
