package postgres

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
		return nil, fmt.Errorf("postgres: usage series: %w", err)
	}
	out := storage.NewSeries(q)
	from, step := q.From.UnixMilli(), q.Step.Milliseconds()
	const bucket = `floor((extract(epoch from at) * 1000 - $1::bigint) / $2::bigint)::bigint`
	rows, err := s.pool.Query(ctx, `SELECT `+bucket+` AS b, `+storage.LatencyBinSQL("latency_us")+` AS bin, count(*),
	sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END)::bigint, sum(CASE WHEN attempts > 1 THEN attempts - 1 ELSE 0 END)::bigint,
	sum(input_tokens)::bigint, sum(cached_tokens)::bigint, sum(output_tokens)::bigint
	FROM usage_records WHERE at >= $3 AND at < $4 GROUP BY b, bin`, from, step, q.From, q.To)
	if err != nil {
		return nil, fmt.Errorf("postgres: usage series: %w", err)
	}
	defer rows.Close()
	if err := storage.AddUsageRows(out, rows); err != nil {
		return nil, fmt.Errorf("postgres: usage series: %w", err)
	}
	rows.Close()
	ev, err := s.pool.Query(ctx, `SELECT `+bucket+` AS b, class, count(*)
	FROM error_events WHERE at >= $3 AND at < $4 GROUP BY b, class`, from, step, q.From, q.To)
	if err != nil {
		return nil, fmt.Errorf("postgres: usage series: error events: %w", err)
	}
	defer ev.Close()
	if err := storage.AddErrorRows(out, ev); err != nil {
		return nil, fmt.Errorf("postgres: usage series: error events: %w", err)
	}
	return out, nil
}
