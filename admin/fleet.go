package admin

import (
	"time"

	"github.com/troupe-gw/troupe/fleet"
	"github.com/valyala/fasthttp"
)

// fleetState is what SetFleet installed: the deployment's live set and,
// with fleet.ownership, this instance's leases.
type fleetState struct {
	f      *fleet.Fleet
	owners *fleet.Owners // nil without ownership
}

// SetFleet shows f (and owners, nil without fleet.ownership) at GET
// /api/admin/fleet. The fleet starts after the admin API is built, hence a
// setter; until it is called that route answers 503.
func (s *Server) SetFleet(f *fleet.Fleet, owners *fleet.Owners) {
	s.fleet.Store(&fleetState{f: f, owners: owners})
}

// fleetRemoteJSON is the remote grants' counters since start.
type fleetRemoteJSON struct {
	Issued   uint64            `json:"issued"`   // leases granted to other instances
	Received uint64            `json:"received"` // leases other instances granted here
	Held     int               `json:"held"`     // leases granted to others (or adopted), not released yet
	Adopted  uint64            `json:"adopted"`  // leases held elsewhere on accounts taken over, counted here
	Withheld int               `json:"withheld"` // leases counted now for members that did not answer a takeover's ask (fleet.PeerStats.Withheld)
	Refused  map[string]uint64 `json:"refused"`  // by reason
}

// fleetRouting is what SetFleetRouting installed.
type fleetRouting struct {
	remoteViews func() int
	peer        *fleet.Peer
}

// SetFleetRouting adds routing across instances to GET /api/admin/fleet:
// remoteViews counts the other instances' accounts the scheduler indexes,
// peer has the remote grants' counters.
func (s *Server) SetFleetRouting(remoteViews func() int, peer *fleet.Peer) {
	s.fleetRouting.Store(&fleetRouting{remoteViews: remoteViews, peer: peer})
}

// fleetJSON is GET /api/admin/fleet (docs/admin-api.md#fleet).
type fleetJSON struct {
	Self      string             `json:"self"`
	Shared    bool               `json:"shared"`    // the set is kept in Redis (false: this instance alone)
	Ownership bool               `json:"ownership"` // fleet.ownership: each account runs on its owner only
	Version   uint64             `json:"version"`
	Heartbeat *time.Time         `json:"heartbeat,omitempty"`
	Error     string             `json:"error,omitempty"` // the last heartbeat's failure
	Members   []fleetMemberJSON  `json:"members"`
	Accounts  []fleetAccountJSON `json:"accounts"`
	Owned     int                `json:"owned"` // accounts running here (with ownership)
	// RemoteViews is how many accounts other instances own whose views
	// this instance's scheduler indexes (routing across instances).
	RemoteViews int `json:"remote_views"`
	// Remote counts the remote grants (nil without routing across instances).
	Remote *fleetRemoteJSON `json:"remote,omitempty"`
}

type fleetMemberJSON struct {
	ID      string    `json:"id"`
	Addr    string    `json:"addr,omitempty"`
	Started time.Time `json:"started"`
	Self    bool      `json:"self,omitempty"`
	// HeartbeatAgeMs is how long ago the member last announced itself, in
	// ms: its age when this instance last read the set (the backend's
	// clock) plus the time since that read (this instance's); absent
	// before the first heartbeat.
	HeartbeatAgeMs *int64 `json:"heartbeat_age_ms,omitempty"`
}

// fleetAccountJSON is one account: its owner by rendezvous hashing over
// the live set, and whether this instance holds its lease (with its token).
type fleetAccountJSON struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Held  bool   `json:"held,omitempty"`
	Token uint64 `json:"token,omitempty"`
}

// adminFleet serves GET /api/admin/fleet.
func (s *Server) adminFleet(ctx *fasthttp.RequestCtx, method string, parts []string) {
	st := s.fleet.Load()
	switch {
	case len(parts) > 0:
		writeError(ctx, errNotFound(string(ctx.Path())))
		return
	case method != "GET":
		writeError(ctx, errMethod(method, string(ctx.Path())))
		return
	case st == nil:
		writeError(ctx, &APIError{Status: 503, Type: "server_error", Code: "unavailable", Message: "The fleet is not running on this server yet."})
		return
	}
	fs := st.f.State()
	out := fleetJSON{Self: st.f.Self().ID, Shared: st.f.Shared(), Ownership: st.owners != nil, Version: fs.Version,
		Error: fs.Err, Members: []fleetMemberJSON{}, Accounts: []fleetAccountJSON{}}
	if !fs.Heartbeat.IsZero() {
		h := fs.Heartbeat.UTC()
		out.Heartbeat = &h
	}
	for _, m := range fs.Members {
		mj := fleetMemberJSON{ID: m.ID, Addr: m.Addr, Started: m.Started, Self: m.ID == out.Self}
		if !fs.Heartbeat.IsZero() {
			age := (m.Age + time.Since(fs.Heartbeat)).Milliseconds()
			mj.HeartbeatAgeMs = &age
		}
		out.Members = append(out.Members, mj)
	}
	accs, err := s.store.ListAccounts(storeCtx(ctx))
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	for _, a := range accs {
		fa := fleetAccountJSON{ID: a.ID, Name: a.Name, Owner: fleet.Owner(a.ID, fs.Members)}
		if st.owners != nil {
			fa.Token, fa.Held = st.owners.Holder(a.ID)
		}
		out.Accounts = append(out.Accounts, fa)
	}
	if st.owners != nil {
		out.Owned = st.owners.Owned()
	}
	if r := s.fleetRouting.Load(); r != nil {
		out.RemoteViews = r.remoteViews()
		ps := r.peer.Stats()
		out.Remote = &fleetRemoteJSON{Issued: ps.Issued, Received: ps.Received, Held: ps.Held, Adopted: ps.Adopted, Withheld: ps.Withheld, Refused: ps.Refused}
	}
	writeJSON(ctx, 200, out)
}
