package storage

import "testing"

// HashKeyBytes and HashKey agree, and both are the hex SHA-256 of the secret.
func TestHashKeyBytes(t *testing.T) {
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // SHA-256("abc")
	if got := HashKey("abc"); got != want {
		t.Fatalf("HashKey = %s, want %s", got, want)
	}
	if got := HashKeyBytes([]byte("abc")); got != want {
		t.Fatalf("HashKeyBytes = %s, want %s", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { HashKeyBytes([]byte("tr-secret")) }); n > 1 {
		t.Errorf("HashKeyBytes: %v allocations, want 1", n)
	}
}
