package gateway

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"sync"
)

// keyDigests remembers the digest (storage.HashKeyBytes, SHA-256 in hex)
// of the secrets of keys that were found, so that a request presenting a
// known key does not hash it again: the digest is filed under a MAC of the
// secret (digestTag) and looked up by it, and the secret itself is never
// kept. It only memoizes a function of the secret: which key a digest
// names, and whether that key may be used (revoked, disabled, expired,
// rotated), stays with keyCache, its generations and its invalidation, so
// nothing here can keep a changed key usable, on this instance or another.
// It is dropped whole all the same with the key cache (keyCache.invalidate,
// on every key change here or broadcast from another instance), so the
// digest of a removed key is not kept either.
//
// Under callgrind storage.HashKeyBytes of a 50-byte key is about 3,500
// instructions and one allocation (its hex string), a remembered digest
// about 940 and none (BenchmarkSecretHash; docs/benchmarks.md, "Issue 21:
// CPU per request, 2026-12-07 (cpu)"). Callgrind has no SHA extensions, so
// it runs SHA-256's AVX2 code; on a CPU with them (this machine's) the
// hash is one compression and the gain smaller, mostly the allocation.
//
// It is safe for concurrent use; a nil *keyDigests remembers nothing.
type keyDigests struct {
	block  cipher.Block // AES-128 under a random key made for this process
	states sync.Pool    // *digestTag: tag's CBC state (a local's slice would escape through block)
	shards [16]digestShard
}

// digestTag is the MAC of a secret under the process's random AES key:
// AES-128 CBC-MAC of the secret's length in one block followed by the
// secret zero-padded to whole blocks. Messages that start with their
// length are prefix-free, on which CBC-MAC is a pseudo-random function, so
// a secret other than a known key's hits that key's digest with
// probability 2⁻¹²⁸ a try, without the AES key, which never leaves the
// process.
type digestTag [16]byte

type digestShard struct {
	mu sync.RWMutex
	m  map[uint64]digestEntry // the tag's first 8 bytes → entry
	_  [32]byte               // keep neighbouring shards' locks off one cache line
}

type digestEntry struct {
	tag  digestTag
	hash string
}

// maxDigestsPerShard bounds a shard (16,384 keys in all); a shard that is
// full starts over, its keys then hashed once more each. Only found keys
// are remembered, so a flood of made-up keys does not evict them.
const maxDigestsPerShard = 1024

// newKeyDigests returns an empty memo under a fresh random AES key.
func newKeyDigests() *keyDigests {
	var key [16]byte
	rand.Read(key[:]) // never fails (crypto/rand)
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return &keyDigests{block: block, states: sync.Pool{New: func() any { return new(digestTag) }}}
}

// tag returns secret's digestTag.
func (d *keyDigests) tag(secret []byte) digestTag {
	st := d.states.Get().(*digestTag)
	*st = digestTag{}
	binary.LittleEndian.PutUint64(st[:8], uint64(len(secret)))
	d.block.Encrypt(st[:], st[:])
	for len(secret) >= aes.BlockSize {
		xorWords(st, secret)
		d.block.Encrypt(st[:], st[:])
		secret = secret[aes.BlockSize:]
	}
	if len(secret) > 0 {
		for i, c := range secret { // zero padding: the bytes past it are XORed with zero
			st[i] ^= c
		}
		d.block.Encrypt(st[:], st[:])
	}
	t := *st
	d.states.Put(st)
	return t
}

// xorWords XORs the first block of b into st.
func xorWords(st *digestTag, b []byte) {
	lo := binary.LittleEndian.Uint64(st[:8]) ^ binary.LittleEndian.Uint64(b[:8])
	hi := binary.LittleEndian.Uint64(st[8:]) ^ binary.LittleEndian.Uint64(b[8:16])
	binary.LittleEndian.PutUint64(st[:8], lo)
	binary.LittleEndian.PutUint64(st[8:], hi)
}

// equalTags compares two tags in constant time: both words are read and
// their differences merged before the one comparison.
func equalTags(a, b *digestTag) bool {
	x := binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(b[:8]) |
		binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])
	return x == 0
}

func (d *keyDigests) shard(t *digestTag) (*digestShard, uint64) {
	k := binary.LittleEndian.Uint64(t[:8])
	return &d.shards[k%uint64(len(d.shards))], k
}

// lookup returns the digest remembered for secret ("" when none) and
// secret's tag, for remember.
func (d *keyDigests) lookup(secret []byte) (hash string, t digestTag) {
	if d == nil {
		return "", t
	}
	t = d.tag(secret)
	sh, k := d.shard(&t)
	sh.mu.RLock()
	e, ok := sh.m[k]
	sh.mu.RUnlock()
	if ok && equalTags(&e.tag, &t) {
		return e.hash, t
	}
	return "", t
}

// remember files hash, the digest of the secret whose tag is t, as a
// found key's. The zero tag means none (lookup's answer when it found the
// digest or has no memo); a secret's tag is zero with probability 2⁻¹²⁸,
// and is then not remembered.
func (d *keyDigests) remember(t digestTag, hash string) {
	if d == nil || t == (digestTag{}) {
		return
	}
	sh, k := d.shard(&t)
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= maxDigestsPerShard {
		sh.m = make(map[uint64]digestEntry, 64)
	}
	sh.m[k] = digestEntry{tag: t, hash: hash}
	sh.mu.Unlock()
}

// forget drops every remembered digest.
func (d *keyDigests) forget() {
	if d == nil {
		return
	}
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		sh.m = nil
		sh.mu.Unlock()
	}
}
