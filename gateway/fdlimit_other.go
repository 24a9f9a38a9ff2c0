//go:build !unix

package gateway

// fdLimit is 0 (unknown) where there is no RLIMIT_NOFILE: the automatic
// connection cap is then effectively off.
func fdLimit() uint64 { return 0 }
