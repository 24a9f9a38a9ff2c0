package postgres

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// BenchmarkInsertUsage measures InsertUsage with batches of 500 records;
// records/s is the throughput of one writer (COPY into the staging table,
// then one INSERT … SELECT that maintains the rollups). "one-group" records
// share one rollup row; "varied" ones spread over about 100 rollup rows per
// batch (keys × accounts × models × statuses); "parallel" runs GOMAXPROCS
// writers of varied batches at once.
func BenchmarkInsertUsage(b *testing.B) {
	const batch = 500
	for _, c := range []struct {
		name string
		recs func() []storage.UsageRecord
	}{
		{"one-group", func() []storage.UsageRecord { return storagetest.SampleUsage("r", batch) }},
		{"varied", func() []storage.UsageRecord { return storagetest.VariedUsage("r", 0, batch) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := openAt(b, storagetest.PostgresDB(b), testSealer(b))
			recs := c.recs()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				b.StopTimer()
				for i := range recs {
					recs[i].RequestID = newID()
				}
				b.StartTimer()
				if err := s.InsertUsage(b.Context(), recs); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
		})
	}
	b.Run("parallel", func(b *testing.B) {
		s := openAt(b, storagetest.PostgresDB(b), testSealer(b))
		b.ReportAllocs()
		b.SetParallelism(2)
		b.RunParallel(func(pb *testing.PB) {
			recs := storagetest.VariedUsage("r", 0, batch)
			for pb.Next() {
				for i := range recs {
					recs[i].RequestID = uuid.NewString()
				}
				if err := s.InsertUsage(b.Context(), recs); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
	})
}

// BenchmarkAPIKeyByHash measures the key lookup among 10,000 keys, from one
// goroutine and from GOMAXPROCS goroutines, and a miss.
func BenchmarkAPIKeyByHash(b *testing.B) {
	s := openAt(b, storagetest.PostgresDB(b), testSealer(b))
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
	storagetest.BenchAccountReload(b, openAt(b, storagetest.PostgresDB(b), testSealer(b)), 10_000)
}
