package sqlite

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// TestUserUsagePlan: a user's request log is read through the index of
// users' records (usage_records_user_at), not by scanning every record
// newest first; the operator's, without a user, through the time index; a
// page after a cursor starts at the cursor.
func TestUserUsagePlan(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	now := time.Now()
	for _, tc := range []struct {
		q    storage.UsageRecordQuery
		want string
	}{
		{storage.UsageRecordQuery{UserID: "u1"}, "usage_records_user_at"},
		{storage.UsageRecordQuery{UserID: "u1", From: now.Add(-time.Hour), To: now}, "usage_records_user_at"},
		{storage.UsageRecordQuery{UserID: "u1", After: storage.UsageCursor{At: now, RequestID: "req_x"}}, "usage_records_user_at"},
		{storage.UsageRecordQuery{From: now.Add(-time.Hour)}, "usage_records_at_id"},
		// A page after a cursor is a range of the index from the cursor on,
		// not a scan from the newest record.
		{storage.UsageRecordQuery{After: storage.UsageCursor{At: now, RequestID: "req_x"}}, "SEARCH usage_records USING INDEX usage_records_at_id ((at,request_id)<(?,?))"},
		{storage.UsageRecordQuery{UserID: "u1", After: storage.UsageCursor{At: now, RequestID: "req_x"}}, "usage_records_user_at (user_id=? AND (at,request_id)<(?,?))"},
	} {
		query, args := listUsageQuery(tc.q)
		rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, tc.want) {
			t.Errorf("%+v: plan %q, want it to use %s", tc.q, p, tc.want)
		}
	}
}
