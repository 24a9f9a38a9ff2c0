package actors

import (
	"strings"
	"sync"
)

// interner holds one copy of each base URL and each list of models or tags
// the pool's accounts were put with, which accounts share instead of a copy
// each: accounts read from storage hold strings and slices of their own,
// although most of a pool's accounts have the same base URL and the same
// models (at 10,000 accounts the copies were about 80 bytes an account of
// live heap). It is never pruned: it holds each distinct value seen, a few
// for a pool of any size. Safe for concurrent use (the account actors run on
// several workers).
type interner struct {
	mu    sync.Mutex
	strs  map[string]string
	lists map[string][]string // by the list's elements joined with a NUL
}

// str returns the interned copy of s. A nil interner returns s.
func (in *interner) str(s string) string {
	if in == nil || s == "" {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.strs[s]; ok {
		return c
	}
	if in.strs == nil {
		in.strs = make(map[string]string)
	}
	s = strings.Clone(s) // not a substring of something larger
	in.strs[s] = s
	return s
}

// list returns a slice with l's elements that is shared by every caller
// asking for the same elements, with no room to append in place; l itself
// when it is empty (nil or not, as it was). Nobody may write its elements (published views share it, as
// copies of a View share their slices already). A nil interner returns a
// copy of l, as each account had before.
func (in *interner) list(l []string) []string {
	if len(l) == 0 {
		return l
	}
	if in == nil {
		return append([]string(nil), l...)
	}
	key := strings.Join(l, "\x00")
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.lists[key]; ok {
		return c
	}
	if in.lists == nil {
		in.lists = make(map[string][]string)
	}
	c := make([]string, len(l))
	for i, s := range l {
		c[i] = strings.Clone(s)
	}
	in.lists[key] = c
	return c
}
