package storagetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// testAccountFeed checks the account change feed: a full read, then only
// what changed (puts and deletions) after the last version, credentials
// sealed or opened as asked, and nothing when nothing changed.
func testAccountFeed(t *testing.T, s storage.Store) {
	var stored []storage.Account
	for i := range 3 {
		a, err := s.PutAccount(ctx(t), SampleAccount(fmt.Sprintf("feed-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, a)
	}
	if !(stored[0].Version < stored[1].Version && stored[1].Version < stored[2].Version) {
		t.Fatalf("versions of three puts = %d, %d, %d, want increasing", stored[0].Version, stored[1].Version, stored[2].Version)
	}
	full, err := s.AccountChanges(ctx(t), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Accounts) != 3 || len(full.Deleted) != 0 || full.Version < stored[2].Version {
		t.Fatalf("full read = %d accounts, %d deleted, version %d; want 3, 0, >= %d", len(full.Accounts), len(full.Deleted), full.Version, stored[2].Version)
	}
	for _, a := range full.Accounts {
		if a.Sealed == "" || a.Credentials != (storage.Credentials{}) {
			t.Fatalf("account %s read sealed: Sealed empty %v, credentials open %v", a.Name, a.Sealed == "", a.Credentials != (storage.Credentials{}))
		}
		c, err := s.OpenCredentials(a.Sealed)
		if err != nil || c.APIKey != "sk-"+a.Name {
			t.Fatalf("OpenCredentials(%s) = api key %q, %v", a.Name, c.APIKey, err)
		}
	}
	if _, err := s.OpenCredentials("v1:nokey:garbage"); err == nil {
		t.Error("OpenCredentials of garbage succeeded")
	}

	// Nothing changed: nothing read, the version stays.
	same, err := s.AccountChanges(ctx(t), full.Version, true)
	if err != nil || len(same.Accounts) != 0 || len(same.Deleted) != 0 || same.Version != full.Version {
		t.Fatalf("read with no change = %d accounts, %d deleted, version %d (was %d), %v", len(same.Accounts), len(same.Deleted), same.Version, full.Version, err)
	}

	// One update and one deletion: exactly those.
	upd := stored[1]
	upd.Priority = 42
	upd, err = s.PutAccount(ctx(t), upd)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAccount(ctx(t), stored[0].Name); err != nil {
		t.Fatal(err)
	}
	ch, err := s.AccountChanges(ctx(t), full.Version, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Accounts) != 1 || ch.Accounts[0].ID != upd.ID || ch.Accounts[0].Priority != 42 || ch.Accounts[0].Version != upd.Version {
		t.Fatalf("changes = %+v, want only %s at priority 42, version %d", ch.Accounts, upd.Name, upd.Version)
	}
	if ch.Accounts[0].Sealed != "" || ch.Accounts[0].Credentials.APIKey != "sk-"+upd.Name {
		t.Errorf("read with open: Sealed %q, api key %q", ch.Accounts[0].Sealed, ch.Accounts[0].Credentials.APIKey)
	}
	if !slices.Equal(ch.Deleted, []string{stored[0].ID}) {
		t.Fatalf("deleted = %v, want [%s]", ch.Deleted, stored[0].ID)
	}
	if ch.Version <= full.Version {
		t.Fatalf("version after two changes = %d, want > %d", ch.Version, full.Version)
	}

	// Put back under the same ID: no longer a deletion.
	back := stored[0]
	back.ID = stored[0].ID
	if _, err := s.PutAccount(ctx(t), back); err != nil {
		t.Fatal(err)
	}
	again, err := s.AccountChanges(ctx(t), full.Version, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Deleted) != 0 || len(again.Accounts) != 2 {
		t.Fatalf("after put back: %d accounts, deleted %v; want 2, none", len(again.Accounts), again.Deleted)
	}
	// A full read has no tombstones.
	if full, err = s.AccountChanges(ctx(t), 0, false); err != nil || len(full.Deleted) != 0 || len(full.Accounts) != 3 {
		t.Fatalf("full read = %d accounts, deleted %v, %v", len(full.Accounts), full.Deleted, err)
	}
}

// testAccountFeedPruned checks the tombstones' retention: a prune keeps
// the tombstones of deletions not past it, deletes the others, and a
// reader whose version is older than a tombstone pruned is answered with
// every account and Full (a full resync), never with a deletion missing;
// a reader past the pruned tombstones still reads only its changes; a
// second prune finds nothing.
func testAccountFeedPruned(t *testing.T, s storage.Store) {
	var acc []storage.Account
	for i := range 4 {
		a, err := s.PutAccount(ctx(t), SampleAccount(fmt.Sprintf("prune-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		acc = append(acc, a)
	}
	full, err := s.AccountChanges(ctx(t), 0, false)
	if err != nil || !full.Full || len(full.Accounts) != 4 {
		t.Fatalf("full read = %d accounts, Full %v, %v; want 4, true", len(full.Accounts), full.Full, err)
	}
	if n, err := s.PruneAccountTombstones(ctx(t), time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("prune without a tombstone = %d, %v", n, err)
	}
	if err := s.DeleteAccount(ctx(t), acc[0].ID); err != nil {
		t.Fatal(err)
	}
	old := full.Version // a reader that has not seen acc[0]'s deletion
	mid, err := s.AccountChanges(ctx(t), old, false)
	if err != nil || mid.Full || !slices.Equal(mid.Deleted, []string{acc[0].ID}) {
		t.Fatalf("after a deletion = deleted %v, Full %v, %v", mid.Deleted, mid.Full, err)
	}
	if err := s.DeleteAccount(ctx(t), acc[1].ID); err != nil {
		t.Fatal(err)
	}
	// Deletions younger than the retention stay, and so does a zero time.
	for _, before := range []time.Time{time.Now().Add(-time.Hour), {}} {
		if n, err := s.PruneAccountTombstones(ctx(t), before); err != nil || n != 0 {
			t.Fatalf("prune before %v = %d, %v; want 0", before, n, err)
		}
	}
	if ch, err := s.AccountChanges(ctx(t), old, false); err != nil || ch.Full || len(ch.Deleted) != 2 {
		t.Fatalf("after a prune of nothing = deleted %v, Full %v, %v; want both deletions", ch.Deleted, ch.Full, err)
	}
	past, err := s.AccountChanges(ctx(t), mid.Version, false) // a reader past both deletions
	if err != nil {
		t.Fatal(err)
	}

	// Both tombstones past the retention: gone, and the readers that had
	// not read them resync in full.
	if n, err := s.PruneAccountTombstones(ctx(t), time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("prune = %d, %v; want 2", n, err)
	}
	for _, since := range []int64{old, mid.Version} {
		ch, err := s.AccountChanges(ctx(t), since, false)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{}
		for _, a := range ch.Accounts {
			names = append(names, a.Name)
		}
		if !ch.Full || len(ch.Deleted) != 0 || !slices.Equal(names, []string{acc[2].Name, acc[3].Name}) || ch.Version < past.Version {
			t.Fatalf("read from %d after the prune = Full %v, accounts %v, deleted %v, version %d; want a full read of %s and %s at >= %d",
				since, ch.Full, names, ch.Deleted, ch.Version, acc[2].Name, acc[3].Name, past.Version)
		}
	}
	same, err := s.AccountChanges(ctx(t), past.Version, false)
	if err != nil || same.Full || len(same.Accounts) != 0 || len(same.Deleted) != 0 {
		t.Fatalf("read from past the pruned tombstones = Full %v, %d accounts, deleted %v, %v; want nothing", same.Full, len(same.Accounts), same.Deleted, err)
	}
	// A deletion after the prune is read as one.
	if err := s.DeleteAccount(ctx(t), acc[2].Name); err != nil {
		t.Fatal(err)
	}
	ch, err := s.AccountChanges(ctx(t), past.Version, false)
	if err != nil || ch.Full || !slices.Equal(ch.Deleted, []string{acc[2].ID}) {
		t.Fatalf("deletion after the prune = Full %v, deleted %v, %v", ch.Full, ch.Deleted, err)
	}
	for want := int64(1); want >= 0; want-- { // then pruned, then nothing left to prune
		if n, err := s.PruneAccountTombstones(ctx(t), time.Now().Add(time.Hour)); err != nil || n != want {
			t.Fatalf("prune = %d, %v; want %d", n, err, want)
		}
	}
}

// testAccountFeedConcurrent has writers put and delete accounts while a
// reader follows the feed from version to version: at the end the reader's
// set equals the store's, with every account at its last version (no
// change read out of order or missed).
func testAccountFeedConcurrent(t *testing.T, s storage.Store) {
	feedConcurrent(t, s, false)
}

// testAccountFeedConcurrentPruned is testAccountFeedConcurrent with every
// tombstone pruned as soon as it is written, again and again, while the
// reader follows: a reader that falls behind a prune resyncs in full
// (dropping what it knew), and still ends with exactly the store's
// accounts; no deletion is lost between a prune and a read.
func testAccountFeedConcurrentPruned(t *testing.T, s storage.Store) {
	feedConcurrent(t, s, true)
}

// feedConcurrent is testAccountFeedConcurrent, with a pruner of every
// tombstone running beside the writers when prune is true.
func feedConcurrent(t *testing.T, s storage.Store, prune bool) {
	const writers, each = 4, 15
	var wg sync.WaitGroup
	done := make(chan struct{})
	known := map[string]int64{}
	var since int64
	fulls := 0
	follow := func() {
		ch, err := s.AccountChanges(ctx(t), since, false)
		if err != nil {
			t.Error(err)
			return
		}
		if ch.Full {
			if since > 0 {
				fulls++
			}
			clear(known)
		}
		for _, a := range ch.Accounts {
			if a.Version <= since && since > 0 && !ch.Full {
				t.Errorf("account %s at version %d read after version %d", a.Name, a.Version, since)
			}
			known[a.ID] = a.Version
		}
		for _, id := range ch.Deleted {
			delete(known, id)
		}
		since = ch.Version
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-done:
				return
			default:
				follow()
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a, err := s.PutAccount(ctx(t), SampleAccount(fmt.Sprintf("fc-%d-%d", w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := s.DeleteAccount(ctx(t), a.ID); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		for prune {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.PruneAccountTombstones(ctx(t), time.Now().Add(time.Hour)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	<-readerDone
	<-pruned
	follow()
	list, err := s.ListAccounts(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, a := range list {
		want[a.ID] = a.Version
	}
	if len(want) != len(known) {
		t.Fatalf("reader knows %d accounts, the store has %d", len(known), len(want))
	}
	for id, v := range want {
		if known[id] != v {
			t.Errorf("account %s: reader at version %d, store at %d", id, known[id], v)
		}
	}
	if prune {
		t.Logf("the reader resynced in full %d times", fulls)
	}
}
