//go:build !unix

package journal

import "os"

// lock does nothing where flock is missing: one data directory per instance
// is then the operator's to keep.
func lock(*os.File) error { return nil }
