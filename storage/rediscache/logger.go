package rediscache

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// UseLogger sends go-redis's own log lines (a failed dial, about one per
// second while Redis is down) to l at debug level, instead of the standard
// logger's unstructured lines on stderr. The outage itself is logged by the
// fallback cache (storage/fallback). go-redis's logger is per process, so
// the last call wins.
func UseLogger(l *slog.Logger) { redis.SetLogger(slogPrinter{l}) }

type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Printf(ctx context.Context, format string, v ...any) {
	p.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
