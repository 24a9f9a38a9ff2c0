package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// BenchmarkUsageDuringFlush is storage/sqlite's on PostgreSQL
// (storagetest.BenchUsageDuringFlush): a statistics flush of 60,006 rows
// (10,000 accounts, 6 keys, plus the provider's) while usage batches of 500
// records go through the journal. PostgreSQL has no single writer: the
// flush's one statement holds its rows' locks, which no usage batch takes.
func BenchmarkUsageDuringFlush(b *testing.B) {
	s := openAt(b, storagetest.PostgresDB(b), testSealer(b))
	cs := storagetest.FlushCounts(10_000, 6, time.Now().UTC().Truncate(time.Hour), 1)
	storagetest.BenchUsageDuringFlush(b, s, cs, storagetest.SampleUsage("r", 500), func(batch int, recs []storage.UsageRecord) {
		for i := range recs {
			recs[i].RequestID = newID()
			recs[i].AccountID = fmt.Sprintf("acct-%05d", i*20+batch%20)
		}
	})
}
