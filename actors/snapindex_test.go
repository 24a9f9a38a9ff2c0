package actors

import (
	"strconv"
	"sync"
	"testing"
)

// TestSnapIndex checks the readers' index against a map through puts,
// replacements and removals spread over every shard.
func TestSnapIndex(t *testing.T) {
	var x snapIndex
	want := map[string]*snapshot{}
	check := func() {
		t.Helper()
		if got := x.len(); got != len(want) {
			t.Fatalf("len %d, want %d", got, len(want))
		}
		for id, s := range want {
			if got, ok := x.load(id); !ok || got != s {
				t.Fatalf("load(%q) = %p, %v; want %p", id, got, ok, s)
			}
		}
		seen := map[*snapshot]bool{}
		x.each(func(s *snapshot) bool { seen[s] = true; return true })
		if len(seen) != len(want) {
			t.Fatalf("each saw %d snapshots, want %d", len(seen), len(want))
		}
	}
	for i := range 3000 {
		id := "acct-" + strconv.Itoa(i)
		s := new(snapshot)
		x.store(id, s, nil)
		want[id] = s
	}
	check()
	for i := 0; i < 3000; i += 3 { // replace a third
		id := "acct-" + strconv.Itoa(i)
		s := new(snapshot)
		x.store(id, s, nil)
		want[id] = s
	}
	check()
	for i := 1; i < 3000; i += 2 { // remove half, and some twice or never put
		id := "acct-" + strconv.Itoa(i)
		x.delete(id)
		x.delete(id)
		delete(want, id)
	}
	x.delete("never")
	check()
	if _, ok := x.load("acct-1"); ok {
		t.Fatal("a removed account is still found")
	}
	for id := range want {
		x.delete(id)
	}
	clear(want)
	check()
	n := 0
	x.store("a", new(snapshot), nil)
	x.store("b", new(snapshot), nil)
	x.each(func(*snapshot) bool { n++; return false })
	if n != 1 {
		t.Fatalf("each went on after false: %d calls", n)
	}
}

// TestSnapIndexReadWhileWriting has readers load and iterate while the
// writer puts and removes (run with -race): a reader never blocks, and an
// account that stays in the index is always found. A callback of each
// reads the index, as EachView's callers may read System.View.
func TestSnapIndexReadWhileWriting(t *testing.T) {
	var x snapIndex
	stay := new(snapshot)
	x.store("stay", stay, nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if s, ok := x.load("stay"); !ok || s != stay {
					t.Error("the account that stays was not found")
					return
				}
				x.each(func(*snapshot) bool {
					_, ok := x.load("stay")
					return ok
				})
			}
		})
	}
	for i := range 20000 {
		id := "acct-" + strconv.Itoa(i%500)
		if i%2 == 0 {
			x.store(id, new(snapshot), nil)
		} else {
			x.delete(id)
		}
	}
	close(done)
	wg.Wait()
}

// The pool's mailboxes in the index: found by ID, listed, replaced with the
// snapshot, and dropped all at once (stop-all) while the snapshots stay.
func TestSnapIndexMailboxes(t *testing.T) {
	var x snapIndex
	boxes := map[string]*mailbox{}
	for i := range 100 {
		id := "acct-" + strconv.Itoa(i)
		var box *mailbox
		if i%4 != 0 { // a quarter not spawned yet
			box = new(mailbox)
			boxes[id] = box
		}
		x.store(id, new(snapshot), box)
	}
	for i := range 100 {
		id := "acct-" + strconv.Itoa(i)
		if got := x.mailbox(id); got != boxes[id] {
			t.Fatalf("mailbox(%q) = %p, want %p", id, got, boxes[id])
		}
	}
	if x.mailbox("never") != nil {
		t.Fatal("a mailbox for an account never put")
	}
	listed := map[string]*mailbox{}
	x.eachMailbox(func(id string, box *mailbox) { listed[id] = box })
	if len(listed) != len(boxes) {
		t.Fatalf("eachMailbox listed %d, want %d", len(listed), len(boxes))
	}
	for id, box := range boxes {
		if listed[id] != box {
			t.Fatalf("eachMailbox gave %q %p, want %p", id, listed[id], box)
		}
	}
	if dropped := x.dropMailboxes(); len(dropped) != len(boxes) {
		t.Fatalf("dropMailboxes returned %d, want %d", len(dropped), len(boxes))
	}
	x.eachMailbox(func(id string, _ *mailbox) { t.Fatalf("%q still has a mailbox", id) })
	if x.len() != 100 {
		t.Fatalf("the snapshots went with the mailboxes: %d left", x.len())
	}
	if _, ok := x.load("acct-1"); !ok {
		t.Fatal("a snapshot went with its mailbox")
	}
}
