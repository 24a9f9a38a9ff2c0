package sqlite

import (
	"context"
	"fmt"

	"github.com/troupe-gw/troupe/storage"
)

// UsageSeries sums the usage records and error events of q's window in q's
// buckets (storage.RequestLog.UsageSeries), in two aggregate queries: the
// records by bucket and latency bin, the events by bucket and class.
func (s *Store) UsageSeries(ctx context.Context, q storage.SeriesQuery) ([]storage.SeriesBucket, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: usage series: %w", err)
	}
	out := storage.NewSeries(q)
	from, to, step := toMillis(q.From), toMillis(q.To), q.Step.Milliseconds()
	rows, err := s.r.QueryContext(ctx, `SELECT (at - ?1) / ?2 AS b, `+storage.LatencyBinSQL("latency_us")+` AS bin, count(*),
	sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END), sum(CASE WHEN attempts > 1 THEN attempts - 1 ELSE 0 END),
	sum(input_tokens), sum(cached_tokens), sum(output_tokens)
	FROM usage_records WHERE at >= ?1 AND at < ?3 GROUP BY b, bin`, from, step, to)
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage series: %w", err)
	}
	defer rows.Close()
	if err := storage.AddUsageRows(out, rows); err != nil {
		return nil, fmt.Errorf("sqlite: usage series: %w", err)
	}
	rows.Close()
	ev, err := s.r.QueryContext(ctx, `SELECT (at - ?1) / ?2 AS b, class, count(*)
	FROM error_events WHERE at >= ?1 AND at < ?3 GROUP BY b, class`, from, step, to)
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage series: error events: %w", err)
	}
	defer ev.Close()
	if err := storage.AddErrorRows(out, ev); err != nil {
		return nil, fmt.Errorf("sqlite: usage series: error events: %w", err)
	}
	return out, nil
}
