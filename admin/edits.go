package admin

import (
	"strconv"
	"sync"
)

// recordLocks serialize the admin API's read-modify-write edits of one
// stored record (an account, a user, an API key) on this instance: the
// storage contract's updates (PutAccount, UpdateUser, UpdateAPIKey) write
// every field, so two edits of different fields that read the record
// before either stored it wrote back each other's old values, and one
// change was lost without a word (PATCH {"priority"} and PATCH {"tags"}
// of one account at once; an operator's PATCH of a user and that user's
// console password change). An editor takes the record's lock, reads the
// record afresh, changes it and stores it.
//
// The zero value is ready; safe for concurrent use. A key's entry lives
// only while someone holds or waits for it. Each lock is a one-slot
// channel, so a waiter is durably blocked for testing/synctest. Edits made
// elsewhere (another instance, the token refresher, the hygiene rule)
// are not ordered by it.
type recordLocks struct {
	mu sync.Mutex
	m  map[string]*recordLock
}

type recordLock struct {
	ch      chan struct{} // holds one token while the lock is held
	waiters int           // holders and waiters; the entry goes at 0
}

// lock takes the lock of key ("account:<id>", "user:<id>", "key:<id>")
// and returns its unlock, to be called once.
func (l *recordLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*recordLock)
	}
	e := l.m[key]
	if e == nil {
		e = &recordLock{ch: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.waiters++
	l.mu.Unlock()
	e.ch <- struct{}{}
	return func() {
		<-e.ch
		l.mu.Lock()
		if e.waiters--; e.waiters == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}

// maxEditAttempts bounds how many times an edit without the editor's
// version reads the record again when another instance changed it between
// the edit's read and its conditional write; the last conflict is a 409.
const maxEditAttempts = 5

// errEditConflict is the 409 of an edit of record what ("account", "user",
// "API key") named name whose version changed since the editor read it:
// read is the version the editor sent (or the edit read), now the stored
// one. Nothing was written.
func errEditConflict(what, name string, read, now int64) *APIError {
	return &APIError{Status: 409, Type: "invalid_request_error", Code: "edit_conflict", Param: "version",
		Message: "The " + what + " " + strconv.Quote(clip(name)) + " was changed by someone else since you read it (version " +
			strconv.FormatInt(read, 10) + ", now " + strconv.FormatInt(now, 10) + "), on this instance or another; " +
			"your change was not saved. Reload it and make your change again."}
}
