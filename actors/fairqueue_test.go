package actors

import (
	"fmt"
	"testing"
)

func parked(key string, weight, n int) []*acquireState {
	out := make([]*acquireState, n)
	for i := range out {
		out[i] = &acquireState{AcquireRequest: AcquireRequest{KeyID: key, Weight: weight, Model: fmt.Sprint(key, i)}}
	}
	return out
}

// A busy key that parked first cannot starve later keys: each round serves
// every key with waiters its weight's turns, FIFO within a key.
func TestWaitQueueWeightedFair(t *testing.T) {
	var q waitQueue
	for _, r := range parked("busy", 1, 1000) {
		q.push(r)
	}
	for _, r := range parked("light", 1, 10) {
		q.push(r)
	}
	for _, r := range parked("heavy", 3, 30) {
		q.push(r)
	}
	served := map[string]int{}
	next := map[string]int{}
	for i := range 50 { // ten rounds of 1 + 1 + 3
		r := q.pop()
		if want := fmt.Sprint(r.KeyID, next[r.KeyID]); r.Model != want {
			t.Fatalf("pop %d: %s, want %s (FIFO within a key)", i, r.Model, want)
		}
		next[r.KeyID]++
		served[r.KeyID]++
	}
	if served["busy"] != 10 || served["light"] != 10 || served["heavy"] != 30 {
		t.Errorf("after 10 rounds: served %v, want busy 10, light 10, heavy 30", served)
	}
	// light and heavy are done; busy alone is served from now on.
	if q.len() != 990 {
		t.Fatalf("len %d, want 990", q.len())
	}
	for range 5 {
		if r := q.pop(); r.KeyID != "busy" {
			t.Fatalf("served %s after the others drained", r.KeyID)
		}
	}
	// A newcomer is served within one round, however long busy's queue is.
	for _, r := range parked("late", 2, 2) {
		q.push(r)
	}
	got := []string{}
	for range 3 {
		got = append(got, q.pop().KeyID)
	}
	lates := 0
	for _, k := range got {
		if k == "late" {
			lates++
		}
	}
	if lates != 2 {
		t.Errorf("next 3 pops %v: want the late key's 2 waiters among them", got)
	}
}

// Abandoned waiters are pruned without disturbing the others' order.
func TestWaitQueuePrune(t *testing.T) {
	var q waitQueue
	a, b := parked("a", 1, 4), parked("b", 1, 4)
	for i := range 4 {
		q.push(a[i])
		q.push(b[i])
	}
	for _, r := range a {
		r.state.Store(acqAbandoned)
	}
	if n := q.prune(); n != 4 || q.len() != 4 {
		t.Fatalf("pruned %d, len %d; want 4 and 4", n, q.len())
	}
	for i := range 4 {
		if r := q.pop(); r != b[i] {
			t.Fatalf("pop %d = %s, want %s", i, r.Model, b[i].Model)
		}
	}
}
