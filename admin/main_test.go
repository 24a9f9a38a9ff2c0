package admin

import (
	"os"
	"testing"

	"github.com/alexedwards/argon2id"
)

// productionHashParams are HashParams as the gateway ships them, kept before
// TestMain lowers them.
var productionHashParams = HashParams

// TestMain makes the tests' password hashes cheap: OWASP's 19 MiB, 2 passes
// are 608 times the memory passes of the parameters here (0.67 s against 0.25
// ms a hash at a load of 27 on 2 cores without the race detector, which slows
// it further), paid by every new admin or console user and every login, while
// what these tests check is the login flow, its limits and lockouts, not the
// hash's cost. A hash keeps the parameters it was made with (the PHC string),
// so verifying a test hash is as cheap as making it. TestHashParamsOWASP
// checks the shipped parameters and hashes once with them.
func TestMain(m *testing.M) {
	HashParams = argon2id.Params{Memory: 64, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}
	os.Exit(m.Run())
}

// TestHashParamsOWASP: the shipped parameters are OWASP's minimum for
// argon2id, and a password hashed with them verifies (and a wrong one does
// not), the round trip every other test makes with cheaper parameters.
func TestHashParamsOWASP(t *testing.T) {
	p := productionHashParams
	if p.Memory != 19*1024 || p.Iterations != 2 || p.Parallelism != 1 || p.SaltLength != 16 || p.KeyLength != 32 {
		t.Fatalf("shipped argon2id parameters %+v, want 19 MiB, 2 passes, 1 lane, 16-byte salt, 32-byte key", p)
	}
	hash, err := argon2id.CreateHash(testAdminPassword, &p)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, err := argon2id.DecodeHash(hash)
	if err != nil || *got != p {
		t.Fatalf("hash %q decodes to %+v (%v), want %+v", hash, got, err, p)
	}
	for pw, want := range map[string]bool{testAdminPassword: true, "wrong": false} {
		ok, err := verifyPassword(t.Context(), pw, hash)
		if err != nil || ok != want {
			t.Fatalf("verifyPassword(%q) = %v, %v; want %v", pw, ok, err, want)
		}
	}
}
