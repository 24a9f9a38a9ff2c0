package admin

import "sync"

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
