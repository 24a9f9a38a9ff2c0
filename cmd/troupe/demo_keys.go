package main

import (
	"context"
	"regexp"

	"github.com/troupe-gw/troupe/storage"
)

// demoKeyName matches the names of the API keys troupe demo creates
// ("demo-<unix nanoseconds>", see startDemoWith).
var demoKeyName = regexp.MustCompile(`^demo-[0-9]+$`)

// revokeDemoKeys deletes the API keys an earlier troupe demo created in
// store, so that only the key of the current run is active: the demo owns
// its data directory and resets its pool at every start the same way
// (syncDemoAccounts). Keys of any other name are kept. It returns how many
// keys it deleted.
func revokeDemoKeys(ctx context.Context, store storage.Store) (int, error) {
	keys, err := store.ListAPIKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		if !demoKeyName.MatchString(k.Name) {
			continue
		}
		if err := store.DeleteAPIKey(ctx, k.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
