package storage

import (
	"crypto/sha256"
	"encoding/hex"
)

// HashKey returns the lowercase hex SHA-256 (64 characters) of a client API key
// secret: the value stored in APIKey.Hash and looked up by APIKeyByHash. The
// secret itself is never stored. A plain hash (no salt, no stretching) is
// enough because the secrets are long random strings, and it keeps the lookup
// a single index probe.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// HashKeyBytes is HashKey of a secret held in bytes (as a request header
// holds it), without copying it into a string first. The hex digits are
// written into an array and copied into the string once: one allocation a
// call, where hex.EncodeToString's buffer and string made two (it runs for
// every request: docs/benchmarks.md, issue 21).
func HashKeyBytes(secret []byte) string {
	sum := sha256.Sum256(secret)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}
