package translate

import "strings"

// Upstreams may keep several content blocks open at once: a Chat upstream
// opens tool_calls index 0 and 1 before either's arguments, a Responses
// upstream adds two function_call items before their deltas, and the
// Messages protocol names every block by index. Decoders therefore tag every
// block event with a slot (one per upstream block, numbered by Stream.slot),
// and the sequencer hands the encoders one block at a time, start → deltas
// → stop, in the order the blocks started: the first open block streams
// live; events of blocks that started after it are kept (copied, adjacent
// deltas joined) and written when every block before them has stopped.
// Every client protocol accepts that order (Anthropic's is exactly that),
// and a stream that never interleaves costs nothing extra.

// heldBlock is a block waiting for the blocks before it to stop.
type heldBlock struct {
	start  sev       // its sevBlockStart (strings copied)
	events []heldEvt // its deltas and signatures so far, in order
	data   []byte    // their texts, back to back
	stop   bool      // it has stopped
}

// heldEvt is one kept event; its text is the next n bytes of data.
type heldEvt struct {
	kind sevKind
	sig  sigKind
	n    int
}

// sequencer orders block events; see above. Its zero value has no live
// block.
type sequencer struct {
	live   int32     // slot of the block the encoder has open, 0 for none
	liveBk blockKind // its kind
	held   []heldBlock
}

// slot returns a new block slot (never 0).
func (s *Stream) slot() int32 {
	s.slots++
	return s.slots
}

// sequence passes a block event (start, delta, signature, stop) on to put
// in the order the encoders need.
func (s *Stream) sequence(dst []byte, e sev) []byte {
	q := &s.seq
	if e.slot == q.live && q.live != 0 {
		dst = s.put(dst, e)
		if e.kind == sevBlockStop {
			q.live, q.liveBk = 0, 0
			dst = s.release(dst)
		}
		return dst
	}
	if e.kind == sevBlockStart {
		if q.live == 0 && len(q.held) == 0 {
			q.live, q.liveBk = e.slot, e.bk
			return s.put(dst, e)
		}
		e.id, e.name, e.itemID = strings.Clone(e.id), strings.Clone(e.name), strings.Clone(e.itemID)
		q.held = append(q.held, heldBlock{start: e})
		return dst
	}
	for i := range q.held {
		h := &q.held[i]
		if h.start.slot != e.slot {
			continue
		}
		switch e.kind {
		case sevBlockStop:
			h.stop = true
		case sevDelta, sevSignature:
			if n := len(h.events); n > 0 && e.kind == sevDelta && h.events[n-1].kind == sevDelta {
				h.events[n-1].n += len(e.text)
			} else {
				h.events = append(h.events, heldEvt{kind: e.kind, sig: e.sig, n: len(e.text)})
			}
			h.data = append(h.data, e.text...)
		}
		return dst
	}
	return dst // an event of a block that is not open: the decoders send none
}

// release writes held blocks now that no block is live: every stopped one
// in full, then the first still open one up to now, which becomes live.
func (s *Stream) release(dst []byte) []byte {
	q := &s.seq
	for len(q.held) > 0 {
		h := q.held[0]
		q.held = q.held[1:]
		dst = s.put(dst, h.start)
		off := 0
		for _, ev := range h.events {
			dst = s.put(dst, sev{kind: ev.kind, sig: ev.sig, bk: h.start.bk, slot: h.start.slot, text: b2s(h.data[off : off+ev.n])})
			off += ev.n
		}
		if !h.stop {
			q.live, q.liveBk = h.start.slot, h.start.bk
			return dst
		}
		dst = s.put(dst, sev{kind: sevBlockStop, bk: h.start.bk, slot: h.start.slot})
	}
	return dst
}

// flush stops the live block and writes every held one, stopped, before
// the stream's finish.
func (s *Stream) flush(dst []byte) []byte {
	q := &s.seq
	if q.live != 0 {
		dst = s.put(dst, sev{kind: sevBlockStop, bk: q.liveBk, slot: q.live})
		q.live, q.liveBk = 0, 0
	}
	for i := range q.held {
		q.held[i].stop = true
	}
	return s.release(dst)
}
