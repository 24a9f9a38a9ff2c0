package routing

import (
	"context"
	"errors"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// discardUsage discards usage records.
type discardUsage struct{}

func (discardUsage) InsertUsage(context.Context, []storage.UsageRecord) error { return nil }

// noUpstream refuses every upstream call.
type noUpstream struct{}

func (noUpstream) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	return nil, errors.New("no upstream in tests")
}
