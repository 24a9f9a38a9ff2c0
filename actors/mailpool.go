package actors

import (
	"runtime"
	"sync"
)

// mailPool runs pooled mailboxes (spawnPooled) on a fixed set of worker
// goroutines: a mailbox with messages and no worker is on the run queue
// (FIFO), and the first worker free takes it. The account actors run on one,
// so a pool of 100,000 accounts costs a few goroutines, and a grant or a
// release reaching an idle account starts none (hollywood's inbox starts a
// goroutine each time an idle actor gets mail: docs/benchmarks.md).
//
// A worker with an empty queue yields poolSpins scheduler turns before it
// parks, as the scheduler's mailbox does: a grant the scheduler sends while
// its worker yields is taken without a wake-up.
type mailPool struct {
	mu     sync.Mutex
	q      []*mailbox      // the run queue, from head on
	head   int             // first queued mailbox in q
	idle   []chan struct{} // the wake channels of parked workers (capacity 1 each)
	closed bool            // close was called: workers exit once the queue is empty
	wg     sync.WaitGroup  // the workers
}

// poolSpins is how many scheduler turns an idle worker yields before it
// parks (mailSpins for the pool's workers, chosen with it).
const poolSpins = 4

// newMailPool starts a pool of n workers (n <= 0: GOMAXPROCS).
func newMailPool(n int) *mailPool {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	p := &mailPool{}
	for range n {
		wake := make(chan struct{}, 1)
		p.wg.Go(func() { p.work(wake) })
	}
	return p
}

// ready queues m to be run, waking a parked worker when there is one. The
// caller has marked m queued, so m is on the queue at most once.
func (p *mailPool) ready(m *mailbox) {
	p.mu.Lock()
	p.q = append(p.q, m)
	var wake chan struct{}
	if n := len(p.idle); n > 0 {
		wake = p.idle[n-1]
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if wake != nil {
		wake <- struct{}{} // taken off idle by this send alone: never blocks
	}
}

// work runs queued mailboxes until the pool is closed and its queue empty.
func (p *mailPool) work(wake chan struct{}) {
	for {
		p.mu.Lock()
		for spins := 0; p.head == len(p.q); spins++ {
			switch {
			case p.closed:
				p.mu.Unlock()
				return
			case spins < poolSpins:
				p.mu.Unlock()
				runtime.Gosched()
			default:
				p.idle = append(p.idle, wake)
				p.mu.Unlock()
				<-wake
			}
			p.mu.Lock()
		}
		m := p.q[p.head]
		p.q[p.head] = nil
		p.head++
		switch {
		case p.head == len(p.q):
			p.q, p.head = p.q[:0], 0
		case p.head >= 1024 && p.head*2 >= len(p.q):
			n := copy(p.q, p.q[p.head:])
			clear(p.q[n:])
			p.q, p.head = p.q[:n], 0
		}
		p.mu.Unlock()
		m.run()
	}
}

// close stops the workers once the queue is empty and waits for them. The
// mailboxes should have stopped: one sent to afterwards is never run.
func (p *mailPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, wake := range idle {
		wake <- struct{}{}
	}
	p.wg.Wait()
}
