package sqlite

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// BenchmarkInsertUsage measures InsertUsage with batches of 500 records on a
// file database; records/s is the throughput of the one writer. Request ids
// that grow with time (UUIDv7, ordered) keep the primary-key index inserts
// local; random ones (UUIDv4) touch a random index page per record. The
// records of a batch share one rollup row, except in "varied", where they
// spread over about 100 (keys × accounts × models × statuses), and in
// "spread" each has a row of its own, as over a pool of 10,000 accounts.
// cpu-ns/record is the process's CPU time (every goroutine's) spent in
// InsertUsage, per record; ns/record its wall time; allocs/record and
// B/record what InsertUsage allocates per record (the request ids, made
// between batches, not counted).
func BenchmarkInsertUsage(b *testing.B) {
	for _, ids := range []struct {
		name string
		new  func() string
		recs func() []storage.UsageRecord
	}{
		{"ordered-ids", newID, func() []storage.UsageRecord { return storagetest.SampleUsage("r", batch) }},
		{"random-ids", uuid.NewString, func() []storage.UsageRecord { return storagetest.SampleUsage("r", batch) }},
		{"varied", newID, func() []storage.UsageRecord { return storagetest.VariedUsage("r", 0, batch) }},
		{"spread", newID, func() []storage.UsageRecord { return spreadUsage(batch) }},
	} {
		b.Run(ids.name, func(b *testing.B) {
			s := openAt(b, filepath.Join(b.TempDir(), "troupe.db"), testSealer(b))
			recs := ids.recs()
			benchInsert(b, s, recs, func(int) {
				for i := range recs {
					recs[i].RequestID = ids.new()
				}
			})
		})
	}
}

// BenchmarkInsertUsageRecorder measures InsertUsage as the usage recorder
// feeds it at 1,000 requests/s over a pool of 10,000 accounts: batches of
// 500 records (the recorder's default), request ids as the gateway makes
// them (the start's unix ms in hex, then random hex: time-ordered), At one
// millisecond apart and growing from batch to batch, each record on an
// account drawn from the 10,000, so a batch adds to about 500 of the hour's
// usage_hourly rows, most of them there already. ns/record is the wall time
// per record, cpu-ns/record the process's CPU time (every goroutine's),
// allocs/record and B/record what InsertUsage allocates per record.
func BenchmarkInsertUsageRecorder(b *testing.B) {
	s, recs, start, rng := recorderSetup(b)
	benchInsert(b, s, recs, func(n int) {
		for i := range recs {
			at := start.Add(time.Duration(n+i) * time.Millisecond)
			recs[i].At = at
			recs[i].RequestID = recorderRequestID(rng, at)
			recs[i].AccountID = fmt.Sprintf("acct-%05d", rng.IntN(accounts))
		}
	})
}

// BenchmarkInsertUsageRecorderDurations is BenchmarkInsertUsageRecorder
// with requests that last: the records come in the order the requests end
// (one a millisecond), and each one's At, its start, is its end less a
// duration drawn log-uniformly from 100 ms to 60 s (short JSON answers to
// long streams), its request id made from its start as the gateway's is.
// So a batch's records are not in At or id order: each lands up to a minute
// (60,000 records) behind the newest one stored, in whatever B-tree is
// kept in the order of either.
func BenchmarkInsertUsageRecorderDurations(b *testing.B) {
	s, recs, start, rng := recorderSetup(b)
	benchInsert(b, s, recs, recorderDurations(recs, start, rng))
}

// recorderDurations returns the next function of
// BenchmarkInsertUsageRecorderDurations: it readies recs as the records of
// requests that ended one a millisecond from start+n ms.
func recorderDurations(recs []storage.UsageRecord, start time.Time, rng *rand.Rand) func(n int) {
	lo, hi := math.Log(0.1), math.Log(60)
	return func(n int) {
		for i := range recs {
			d := time.Duration(math.Exp(lo+rng.Float64()*(hi-lo)) * float64(time.Second))
			at := start.Add(time.Duration(n+i)*time.Millisecond - d).Truncate(time.Millisecond)
			recs[i].At, recs[i].Latency = at, d
			recs[i].RequestID = recorderRequestID(rng, at)
			recs[i].AccountID = fmt.Sprintf("acct-%05d", rng.IntN(accounts))
		}
	}
}

// Sizes of the recorder benchmarks: records a batch, accounts drawn from.
const (
	batch    = 500
	accounts = 10_000
)

// recorderSetup opens a store in a file of b's and returns it with a
// batch of sample records, the benchmarks' first start time and a seeded
// generator.
func recorderSetup(b *testing.B) (*Store, []storage.UsageRecord, time.Time, *rand.Rand) {
	s := openAt(b, filepath.Join(b.TempDir(), "troupe.db"), testSealer(b))
	return s, storagetest.SampleUsage("r", batch), time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC), rand.New(rand.NewPCG(1, 2))
}

// benchInsert runs InsertUsage on recs once per b.Loop, after next(n)
// readies them (n: records inserted so far; not timed), and reports per
// record: ns/record the wall time, cpu-ns/record the process's CPU time
// (every goroutine's), allocs/record and B/record what InsertUsage
// allocates.
func benchInsert(b *testing.B, s *Store, recs []storage.UsageRecord, next func(n int)) {
	b.ReportAllocs()
	var (
		n             int
		cpu           time.Duration
		m             runtime.MemStats
		allocs, bytes uint64
	)
	for b.Loop() {
		b.StopTimer()
		next(n)
		runtime.ReadMemStats(&m)
		allocs0, bytes0 := m.Mallocs, m.TotalAlloc
		b.StartTimer()
		cpu0 := cputime.Process()
		if err := s.InsertUsage(b.Context(), recs); err != nil {
			b.Fatal(err)
		}
		cpu += cputime.Process() - cpu0
		b.StopTimer()
		runtime.ReadMemStats(&m)
		allocs, bytes = allocs+m.Mallocs-allocs0, bytes+m.TotalAlloc-bytes0
		b.StartTimer()
		n += len(recs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/record")
	b.ReportMetric(float64(allocs)/float64(n), "allocs/record")
	b.ReportMetric(float64(bytes)/float64(n), "B/record")
}

// recorderRequestID is a request id of the gateway's form for a request
// started at at: "req_", the unix ms in 12 hex digits, 20 random ones.
func recorderRequestID(rng *rand.Rand, at time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixMilli())<<16)
	binary.BigEndian.PutUint64(b[8:], rng.Uint64())
	b[6], b[7] = byte(rng.Uint32()), byte(rng.Uint32())
	return "req_" + hex.EncodeToString(b[:])
}

// spreadUsage is n records of one key and model, each on an account of its own.
func spreadUsage(n int) []storage.UsageRecord {
	recs := storagetest.SampleUsage("r", n)
	for i := range recs {
		recs[i].AccountID = fmt.Sprintf("acct-%05d", i)
	}
	return recs
}

// BenchmarkAPIKeyByHash measures the key lookup among 10,000 keys, from one
// goroutine and from GOMAXPROCS goroutines.
func BenchmarkAPIKeyByHash(b *testing.B) {
	s := openAt(b, filepath.Join(b.TempDir(), "troupe.db"), testSealer(b))
	const keys = 10000
	hashes := make([]string, keys)
	for i := range hashes {
		k := storagetest.SampleAPIKey(fmt.Sprintf("key-%05d", i))
		if _, err := s.CreateAPIKey(b.Context(), k); err != nil {
			b.Fatal(err)
		}
		hashes[i] = k.Hash
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.APIKeyByHash(b.Context(), hashes[i%keys]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := s.APIKeyByHash(b.Context(), hashes[i%keys]); err != nil {
					b.Error(err)
					return
				}
				i += 7
			}
		})
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		miss := storage.HashKey("sk-troupe-unknown")
		for b.Loop() {
			if _, err := s.APIKeyByHash(b.Context(), miss); err == nil {
				b.Fatal("found")
			}
		}
	})
}

// BenchmarkAccountReload: the account sync's reload at 10k accounts, a full
// ListAccounts against the change feed (storagetest.BenchAccountReload).
func BenchmarkAccountReload(b *testing.B) {
	storagetest.BenchAccountReload(b, openAt(b, filepath.Join(b.TempDir(), "troupe.db"), testSealer(b)), 10_000)
}

// BenchmarkAddAttemptCounts measures one flush of the attempt statistics
// (stats.Store.Flush) as the 1,000 req/s phase of the 10k-accounts bench
// makes it: 5 s of attempts spread over 4,000 accounts, five rows each
// (class, status, latency bin, input and output tokens), plus the provider's
// rows, added to rows that exist already (the hour's earlier flushes).
// cpu-ns/row is the process's CPU time per row.
func BenchmarkAddAttemptCounts(b *testing.B) {
	const accounts, keys = 4000, 5
	hour := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	var cs []storage.AttemptCount
	for a := range accounts {
		for k := range keys {
			cs = append(cs, storage.AttemptCount{Scope: storage.StatsAccount, Subject: fmt.Sprintf("acct-%05d", a), Hour: hour, Key: 64 + 30*k, N: 1})
		}
	}
	for k := range keys {
		cs = append(cs, storage.AttemptCount{Scope: storage.StatsProvider, Subject: "openai", Hour: hour, Key: 64 + 30*k, N: accounts})
	}
	s := openAt(b, filepath.Join(b.TempDir(), "troupe.db"), testSealer(b))
	if err := s.AddAttemptCounts(b.Context(), cs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cputime.Process()
	for b.Loop() {
		if err := s.AddAttemptCounts(b.Context(), cs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(cs)), "rows/op")
	b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N*len(cs)), "cpu-ns/row")
}

// BenchmarkUsageQueries measures the queries that read usage_records, on a
// file database of 200,000 records of the gateway's form (the recorder
// benchmark's: time-ordered request ids, 10,000 accounts), one every 250 ms
// (about 14 hours), a tenth of them a user's (50 users), 2 % failed:
// the request log's pages (newest first; after a cursor; an account's in an
// hour; a user's; the failed ones), the export of an hour (UsageRecords,
// oldest first), the usage series of the whole range by minute, and the
// count. Each reports the rows it read per op.
func BenchmarkUsageQueries(b *testing.B) {
	const (
		records = 200_000
		every   = 250 * time.Millisecond
	)
	s := openAt(b, filepath.Join(b.TempDir(), "troupe.db"), testSealer(b))
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	recs := storagetest.SampleUsage("r", batch)
	for n := 0; n < records; n += batch {
		for i := range recs {
			at := start.Add(time.Duration(n+i) * every)
			r := &recs[i]
			r.At, r.RequestID = at, recorderRequestID(rng, at)
			r.AccountID = fmt.Sprintf("acct-%05d", rng.IntN(accounts))
			r.UserID, r.Status = "", 200
			if (n+i)%10 == 0 {
				r.UserID = fmt.Sprintf("user-%02d", rng.IntN(50))
			}
			if (n+i)%50 == 7 {
				r.Status = 500
			}
		}
		if err := s.InsertUsage(b.Context(), recs); err != nil {
			b.Fatal(err)
		}
	}
	end := start.Add(records * every)
	mid := start.Add(records / 2 * every)
	midPage, err := s.ListUsageRecords(b.Context(), storage.UsageRecordQuery{To: mid, Limit: 1})
	if err != nil || len(midPage) != 1 {
		b.Fatalf("the middle record: %v (%d)", err, len(midPage))
	}
	cursor := storage.UsageCursor{At: midPage[0].At, RequestID: midPage[0].RequestID}
	list := func(q storage.UsageRecordQuery) func(b *testing.B) int {
		return func(b *testing.B) int {
			rows, err := s.ListUsageRecords(b.Context(), q)
			if err != nil {
				b.Fatal(err)
			}
			return len(rows)
		}
	}
	for _, bc := range []struct {
		name string
		run  func(b *testing.B) int
	}{
		{"list/newest", list(storage.UsageRecordQuery{})},
		{"list/after-cursor", list(storage.UsageRecordQuery{After: cursor})},
		{"list/account-hour", list(storage.UsageRecordQuery{From: mid, To: mid.Add(time.Hour), AccountID: "acct-00042"})},
		{"list/user", list(storage.UsageRecordQuery{UserID: "user-07", To: mid})},
		{"list/failed", list(storage.UsageRecordQuery{FailedOnly: true, To: mid})},
		{"export/hour", func(b *testing.B) int {
			rows, err := s.UsageRecords(b.Context(), storage.RequestLogQuery{From: mid, To: mid.Add(time.Hour), Limit: storage.MaxRequestLogLimit})
			if err != nil {
				b.Fatal(err)
			}
			return len(rows)
		}},
		{"series/all-by-minute", func(b *testing.B) int {
			buckets, err := s.UsageSeries(b.Context(), storage.SeriesQuery{From: start, To: end, Step: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			return len(buckets)
		}},
		{"count", func(b *testing.B) int {
			if _, err := s.CountUsage(b.Context()); err != nil {
				b.Fatal(err)
			}
			return 1
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			rows := 0
			for b.Loop() {
				rows = bc.run(b)
			}
			b.ReportMetric(float64(rows), "rows/op")
		})
	}
}

// BenchmarkInsertUsageUsers measures InsertUsage with batches of 500
// records as BenchmarkInsertUsageRecorder makes them, "users" with each
// record of one of 10 users (a cost of 1 to 5,000 micro-units, one of 4
// models), so every record is charged in its batch (a ledger row, the
// balance, the user's daily rollup), "operator" with the same records of
// operator keys (no user, no charge). allocs/record and B/record are what
// InsertUsage allocates per record.
func BenchmarkInsertUsageUsers(b *testing.B) {
	for _, users := range []bool{true, false} {
		name := "operator"
		if users {
			name = "users"
		}
		b.Run(name, func(b *testing.B) {
			s, recs, next := usersSetup(b, users)
			benchInsert(b, s, recs, next)
		})
	}
}

// Sizes of BenchmarkInsertUsageUsers: users and models its records are of.
const (
	benchUsers  = 10
	benchModels = 4
)

// usersSetup opens a store in a file of tb's with benchUsers users (a
// balance of 10^12 micro-units each) and returns it with a batch of
// records and the function readying them as batch n of
// BenchmarkInsertUsageUsers: the recorder's records, each of a user drawn
// from them (withUsers) or of none.
func usersSetup(tb testing.TB, withUsers bool) (*Store, []storage.UsageRecord, func(n int)) {
	s := openAt(tb, filepath.Join(tb.TempDir(), "troupe.db"), testSealer(tb))
	ids := make([]string, benchUsers)
	for i := range ids {
		u, err := s.CreateUser(tb.Context(), storage.User{Name: fmt.Sprintf("user-%02d", i)},
			storage.NewUser{Balance: 1_000_000_000_000, Actor: "cli", Note: "bench"})
		if err != nil {
			tb.Fatal(err)
		}
		ids[i] = u.ID
	}
	recs := storagetest.SampleUsage("r", batch)
	start, rng := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC), rand.New(rand.NewPCG(1, 2))
	return s, recs, func(n int) {
		for i := range recs {
			at := start.Add(time.Duration(n+i) * time.Millisecond)
			recs[i].At = at
			recs[i].RequestID = recorderRequestID(rng, at)
			recs[i].AccountID = fmt.Sprintf("acct-%05d", rng.IntN(accounts))
			recs[i].Model = fmt.Sprintf("model-%d", rng.IntN(benchModels))
			recs[i].UserID, recs[i].Cost = "", 0
			if withUsers {
				recs[i].UserID, recs[i].Cost = ids[rng.IntN(benchUsers)], 1+rng.Int64N(5000)
			}
		}
	}
}
