package main

import (
	"os"
	"testing"

	"github.com/alexedwards/argon2id"
	"github.com/troupe-gw/troupe/admin"
)

// TestMain makes the admin password hashes of the gateways these tests run in
// process cheap: each start on an empty store hashes a new admin password
// with OWASP's 19 MiB, 2 passes (admin.HashParams), 608 times the memory
// passes of the parameters here (0.67 s against 0.25 ms a hash at a load of
// 27 on 2 cores, without the race detector, which slows it further), while
// these tests check what the gateway does, not the hash's cost. A hash keeps
// the parameters it was made with, so logins verify at the same lower cost.
// Package admin's TestHashParamsOWASP checks the shipped parameters; the
// gateways these tests start as separate processes (the built binary, or this
// one as troupe in e2e_bench_test.go's init) keep them.
func TestMain(m *testing.M) {
	admin.HashParams = argon2id.Params{Memory: 64, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}
	os.Exit(m.Run())
}
