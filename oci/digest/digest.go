// Package digest is the content digest of the OCI image specification: "algorithm:encoded",
// as in "sha256:" and 64 lowercase hex digits. It keeps the API and the verdicts of
// github.com/opencontainers/go-digest v1.0.0 (the names, the errors and their texts, which
// strings Validate accepts), which the tests hold it to, input for input.
//
// Why our own: go-digest compiles five regular expressions in its package initialisation,
// which Go runs before main on every start of every binary that links it, and the front end
// (bin/pylayer, which starts every command line, a session's run, exec and shell among them)
// linked it: ~92 KB and 841 allocations, ~0.2-0.3 ms of `pylayer --version`, whose budget is
// 3 ms, and of every session start (GODEBUG=inittrace=1 and bench/run.sh (e)). The checks
// here are byte loops, and run only when called. image-spec's Go types import go-digest, so
// oci/spec/v1 declares them over this Digest. (The full binary still links go-digest, through
// cosign's library.)
package digest

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
)

// Digest is "algorithm:encoded". Algorithm and Encoded panic on a string without ':'; call
// Validate (or Parse) on a digest from outside first.
type Digest string

// Algorithm names a digest algorithm.
type Algorithm string

// The algorithms go-digest knows; Canonical is the one this module writes.
const (
	SHA256    Algorithm = "sha256"
	SHA384    Algorithm = "sha384"
	SHA512    Algorithm = "sha512"
	Canonical           = SHA256
)

// The errors of Validate, with go-digest's texts.
var (
	ErrDigestInvalidFormat = errors.New("invalid checksum digest format")
	ErrDigestInvalidLength = errors.New("invalid checksum digest length")
	ErrDigestUnsupported   = errors.New("unsupported digest algorithm")
)

// String returns a as a string.
func (a Algorithm) String() string { return string(a) }

// size is the length in bytes of a's sums, 0 for an algorithm Validate does not accept.
func (a Algorithm) size() int {
	switch a {
	case SHA256:
		return 32
	case SHA384:
		return 48
	case SHA512:
		return 64
	}
	return 0
}

// Available reports whether Validate accepts digests of a.
func (a Algorithm) Available() bool { return a.size() != 0 }

// Validate checks that encoded is a's sum in lowercase hex, of the right length.
func (a Algorithm) Validate(encoded string) error {
	n := a.size()
	if n == 0 {
		return ErrDigestUnsupported
	}
	if len(encoded) != 2*n {
		return ErrDigestInvalidLength
	}
	for i := 0; i < len(encoded); i++ {
		if c := encoded[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ErrDigestInvalidFormat
		}
	}
	return nil
}

// FromReader is the digest of algorithm a of what r reads, to its end.
func (a Algorithm) FromReader(r io.Reader) (Digest, error) {
	var h hash.Hash
	switch a {
	case SHA256:
		h = sha256.New()
	case SHA384:
		h = sha512.New384()
	case SHA512:
		h = sha512.New()
	default:
		return "", fmt.Errorf("%s: %w", a, ErrDigestUnsupported)
	}
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return NewDigestFromBytes(a, h.Sum(nil)), nil
}

// FromBytes is the SHA-256 digest of p.
func FromBytes(p []byte) Digest {
	sum := sha256.Sum256(p)
	return NewDigestFromBytes(SHA256, sum[:])
}

// FromString is the SHA-256 digest of s.
func FromString(s string) Digest { return FromBytes([]byte(s)) }

// NewDigestFromBytes is the digest of algorithm a whose sum is b.
func NewDigestFromBytes(a Algorithm, b []byte) Digest {
	return NewDigestFromEncoded(a, hex.EncodeToString(b))
}

// NewDigestFromEncoded is the digest of algorithm a whose encoded sum is encoded, unchecked.
func NewDigestFromEncoded(a Algorithm, encoded string) Digest {
	return Digest(string(a) + ":" + encoded)
}

// Parse is s as a Digest, checked by Validate.
func Parse(s string) (Digest, error) {
	d := Digest(s)
	return d, d.Validate()
}

// Validate checks d: an algorithm Validate accepts and its encoded sum, or else the error
// go-digest gives (ErrDigestUnsupported for a well-formed digest of another algorithm).
func (d Digest) Validate() error {
	s := string(d)
	i := strings.IndexByte(s, ':')
	if i <= 0 || i+1 == len(s) {
		return ErrDigestInvalidFormat
	}
	a, encoded := Algorithm(s[:i]), s[i+1:]
	if !a.Available() {
		if !wellFormed(string(a), encoded) {
			return ErrDigestInvalidFormat
		}
		return ErrDigestUnsupported
	}
	return a.Validate(encoded)
}

// wellFormed reports whether alg ":" encoded, split at its first ':', matches the OCI
// digest grammar, go-digest's ^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$ (a second
// ':' is not in encoded's alphabet).
func wellFormed(alg, encoded string) bool {
	if encoded == "" {
		return false
	}
	lowerAlnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	// alg: components of [a-z0-9]+ joined by single separators.
	comp := 0
	for i := 0; i < len(alg); i++ {
		switch c := alg[i]; {
		case lowerAlnum(c):
			comp++
		case c == '.' || c == '+' || c == '_' || c == '-':
			if comp == 0 {
				return false
			}
			comp = 0
		default:
			return false
		}
	}
	if comp == 0 {
		return false
	}
	for i := 0; i < len(encoded); i++ {
		if c := encoded[i]; !(lowerAlnum(c) || c >= 'A' && c <= 'Z' || c == '=' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Algorithm is d's algorithm.
func (d Digest) Algorithm() Algorithm { return Algorithm(d[:d.sepIndex()]) }

// Encoded is d's encoded sum.
func (d Digest) Encoded() string { return string(d[d.sepIndex()+1:]) }

// String returns d as a string.
func (d Digest) String() string { return string(d) }

func (d Digest) sepIndex() int {
	i := strings.IndexByte(string(d), ':')
	if i < 0 {
		panic(fmt.Sprintf("no ':' separator in digest %q", d))
	}
	return i
}
