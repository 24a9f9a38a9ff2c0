package admin

import (
	"context"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// adminState is what the admin API keeps besides the Server's own fields.
type adminState struct {
	once  sync.Once
	local storage.Cache                  // sessions and login counters when the Server has no cache
	ui    atomic.Pointer[uiFiles]        // the admin UI's files, served at /admin; nil: not installed
	info  atomic.Pointer[map[string]any] // instance facts for GET /api/admin/settings

	listMu sync.Mutex
	listAt time.Time         // when list was read; zero: stale
	list   []storage.Account // the stored accounts, credentials masked (see accountList)
}

// accountListTTL is how long the admin API reuses its read of the stored
// accounts for list pages: the UI pages through 10,000+ accounts, and
// reading them all (unsealing every credential) costs far more than a page.
// The API's own writes drop it at once; changes made elsewhere (the CLI,
// another instance) show within this time.
const accountListTTL = 2 * time.Second

// accountList returns every stored account ordered by name, read at most
// accountListTTL ago, with each credential replaced by "set" when present
// (the list answers only whether credentials are set, and keeps no secret
// in memory). The slice is shared: callers must not modify it.
func (s *Server) accountList(ctx context.Context) ([]storage.Account, error) {
	s.adm.listMu.Lock()
	if time.Since(s.adm.listAt) < accountListTTL {
		l := s.adm.list
		s.adm.listMu.Unlock()
		return l, nil
	}
	s.adm.listMu.Unlock()
	accs, err := s.store.ListAccounts(storeCtx(ctx))
	if err != nil {
		return nil, err
	}
	mask := func(v *string) {
		if *v != "" {
			*v = "set"
		}
	}
	for i := range accs {
		c := &accs[i].Credentials
		mask(&c.APIKey)
		mask(&c.AccessToken)
		mask(&c.RefreshToken)
		mask(&c.IDToken)
		mask(&c.AccountID)
	}
	s.adm.listMu.Lock()
	s.adm.list, s.adm.listAt = accs, time.Now()
	s.adm.listMu.Unlock()
	return accs, nil
}

// accountsChanged drops the cached account list after a write.
func (s *Server) accountsChanged() {
	s.adm.listMu.Lock()
	s.adm.listAt = time.Time{}
	s.adm.list = nil
	s.adm.listMu.Unlock()
}

// adminCache is the cache holding admin sessions and login counters: the
// Server's cache (shared by every instance with Redis), or a private
// in-memory one when the Server was built without a cache.
func (s *Server) adminCache() storage.Cache {
	if s.cache != nil {
		return s.cache
	}
	s.adm.once.Do(func() { s.adm.local = memcache.New(memcache.Options{}) })
	return s.adm.local
}

// uiFiles holds the admin UI's file system.
type uiFiles struct{ fs fs.FS }

// SetInfo sets the instance facts GET /api/admin/settings shows under
// "instance" (version, storage and cache drivers, listen address, mode…).
// Values must not hold secrets; info must not be changed after the call.
func (s *Server) SetInfo(info map[string]any) { s.adm.info.Store(&info) }
