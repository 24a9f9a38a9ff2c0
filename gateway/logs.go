package gateway

import (
	"time"

	"github.com/troupe-gw/troupe/internal/ratelog"
)

// logEvents are the front's rate-limited log lines (internal/ratelog): a
// failure repeated thousands of times a second leaves a few lines each 10 s,
// the next one saying how many were suppressed.
type logEvents struct {
	wsClosed *ratelog.Event // a client WebSocket closed for idling or not reading
}

// logBurst lines per logWindow for each kind of line.
const (
	logBurst  = 10
	logWindow = 10 * time.Second
)

func newLogEvents() logEvents {
	return logEvents{
		wsClosed: ratelog.New(logBurst, logWindow),
	}
}
