package gateway

import (
	"crypto/rand"
	"math/big"

	"github.com/troupe-gw/troupe/storage"
)

// KeyPrefix starts every Troupe API key.
const KeyPrefix = "sk-troupe-"

const keyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewKey returns a fresh API key secret ("sk-troupe-" and 40 base62
// characters, about 238 bits of entropy) and the storage.APIKey describing it
// (name set, hash and display prefix filled). The secret is shown to the
// operator once and never stored.
func NewKey(name string) (secret string, key storage.APIKey, err error) {
	b := make([]byte, 0, len(KeyPrefix)+40)
	b = append(b, KeyPrefix...)
	max := big.NewInt(int64(len(keyAlphabet)))
	for range 40 {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", storage.APIKey{}, err
		}
		b = append(b, keyAlphabet[n.Int64()])
	}
	secret = string(b)
	return secret, storage.APIKey{
		Name:   name,
		Hash:   storage.HashKey(secret),
		Prefix: secret[:len(KeyPrefix)+4],
	}, nil
}
