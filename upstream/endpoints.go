package upstream

import (
	"net/url"
	"runtime"
	"strings"
	"sync"
	"weak"
)

// endpoints interns the parsed endpoint URLs of the accounts' transports. A
// pool of thousands of accounts usually sits on a handful of base URLs;
// interned, its transports share one *url.URL per endpoint instead of
// holding one each (two to four per account, about 230 bytes apiece:
// docs/benchmarks.md, issue 21). The transports only read them. An entry
// lives while a transport holds its URL (the table's pointer is weak), and
// the URL's cleanup deletes the entry once none does, so removed accounts
// leave nothing behind.
var endpoints = &urlTable{m: make(map[string]weak.Pointer[url.URL])}

// urlTable maps keys to URLs that are parsed once and shared. It is safe
// for concurrent use.
type urlTable struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[url.URL]
}

// get returns the URL interned under key, or interns and returns mk's. The
// URL must never be modified.
func (t *urlTable) get(key string, mk func() *url.URL) *url.URL {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wp, ok := t.m[key]; ok {
		if u := wp.Value(); u != nil {
			return u
		}
	}
	u := mk()
	wp := weak.Make(u)
	t.m[key] = wp
	runtime.AddCleanup(u, t.forget, urlEntry{key: key, wp: wp})
	return u
}

// urlEntry names one interned URL for its cleanup.
type urlEntry struct {
	key string
	wp  weak.Pointer[url.URL]
}

// forget deletes e's entry, unless the key has been interned anew since.
func (t *urlTable) forget(e urlEntry) {
	t.mu.Lock()
	if t.m[e.key] == e.wp {
		delete(t.m, e.key)
	}
	t.mu.Unlock()
}

// keys returns the keys of the entries that contain sub (for tests).
func (t *urlTable) keys(sub string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k := range t.m {
		if strings.Contains(k, sub) {
			out = append(out, k)
		}
	}
	return out
}
