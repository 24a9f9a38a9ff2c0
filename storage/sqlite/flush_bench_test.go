package sqlite

import (
	"fmt"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// BenchmarkUsageDuringFlush is storagetest.BenchUsageDuringFlush on SQLite,
// whose one writer the flush and the usage batches share: 10,000 accounts
// with 6 rows each (60,006 rows) and batches of 500 usage records of the
// recorder benchmark's form (recorderSetup).
func BenchmarkUsageDuringFlush(b *testing.B) {
	s, recs, start, rng := recorderSetup(b)
	cs := storagetest.FlushCounts(accounts, 6, start.Truncate(time.Hour), 1)
	n := 0
	storagetest.BenchUsageDuringFlush(b, s, cs, recs, func(_ int, recs []storage.UsageRecord) {
		for i := range recs {
			at := start.Add(time.Duration(n+i) * time.Millisecond)
			recs[i].At = at
			recs[i].RequestID = recorderRequestID(rng, at)
			recs[i].AccountID = fmt.Sprintf("acct-%05d", rng.IntN(accounts))
		}
		n += len(recs)
	})
}
