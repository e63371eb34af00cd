package sign

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
)

// PEM types of cosign's encrypted private keys: what `cosign generate-key-pair` writes
// now, and what older versions wrote.
const (
	pemTypeSigstore = "ENCRYPTED SIGSTORE PRIVATE KEY"
	pemTypeCosign   = "ENCRYPTED COSIGN PRIVATE KEY"
)

// PasswordEnv is the environment variable cosign reads a key's password from.
const PasswordEnv = "COSIGN_PASSWORD"

// maxKeyFileSize bounds the key files this package reads; real ones are < 1 KiB.
const maxKeyFileSize = 64 << 10

var (
	// ErrWrongPassword: the private key could not be decrypted with the password given.
	ErrWrongPassword = errors.New("wrong password for private key")
	// ErrInvalidKey: a key file is not a cosign private key or PEM public key.
	ErrInvalidKey = errors.New("invalid key file")
)

// PasswordFromEnv returns the value of $COSIGN_PASSWORD, the default password source
// of LoadSigner. An empty value is an empty password; an unset variable is an error,
// because a library must never prompt.
func PasswordFromEnv() ([]byte, error) {
	p, ok := os.LookupEnv(PasswordEnv)
	if !ok {
		return nil, fmt.Errorf("%s is not set: set it to the private key's password (empty for a key without one)", PasswordEnv)
	}
	return []byte(p), nil
}

// LoadSigner reads a cosign private key file: the encrypted PEM ("ENCRYPTED SIGSTORE
// PRIVATE KEY" or "ENCRYPTED COSIGN PRIVATE KEY") that `cosign generate-key-pair` and
// GenerateKeyPair write. password supplies the password (nil: PasswordFromEnv). A
// wrong password wraps ErrWrongPassword, anything but a cosign private key wraps
// ErrInvalidKey. Error messages never contain the password, and the password bytes are
// zeroed after use.
func LoadSigner(ctx context.Context, keyPath string, password func() ([]byte, error)) (Signer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := readKeyFile(keyPath)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("private key %s: %w: no PEM block; generate a key pair with `pylayer keygen` or `cosign generate-key-pair`", keyPath, ErrInvalidKey)
	}
	if block.Type != pemTypeSigstore && block.Type != pemTypeCosign {
		hint := ""
		if strings.Contains(block.Type, "PUBLIC KEY") {
			hint = " (this is a public key: signing needs the private key, e.g. cosign.key)"
		} else if strings.Contains(block.Type, "PRIVATE KEY") {
			hint = " (an unencrypted key: import it with `cosign import-key-pair --key FILE`)"
		}
		return nil, fmt.Errorf("private key %s: %w: PEM type %q is not %q%s", keyPath, ErrInvalidKey, block.Type, pemTypeSigstore, hint)
	}
	check := ""
	if password == nil {
		password, check = PasswordFromEnv, " (check "+PasswordEnv+")"
	}
	pass, err := password()
	if err != nil {
		return nil, fmt.Errorf("private key %s: reading password: %w", keyPath, err)
	}
	der, err := encrypted.Decrypt(block.Bytes, pass)
	clear(pass)
	if err != nil {
		// go-securesystemslib's "encrypted: decryption failed" is what a wrong password
		// (and only a wrong password or a corrupt file) yields.
		if strings.Contains(err.Error(), "decryption failed") {
			return nil, fmt.Errorf("private key %s: %w%s", keyPath, ErrWrongPassword, check)
		}
		return nil, fmt.Errorf("private key %s: %w: %v", keyPath, ErrInvalidKey, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(der)
	clear(der)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w: %v", keyPath, ErrInvalidKey, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key %s: %w: a %T key cannot sign", keyPath, ErrInvalidKey, key)
	}
	if err := checkPublicKey(signer.Public()); err != nil {
		return nil, fmt.Errorf("private key %s: %w: %v", keyPath, ErrInvalidKey, err)
	}
	return signer, nil
}

// GenerateKeyPair creates a new ECDSA P-256 key pair, as `cosign generate-key-pair`
// does: the private key encrypted with password in cosign's PEM format, and the
// public key as a PKIX PEM block.
func GenerateKeyPair(password []byte) (privPEM, pubPEM []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key pair: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key pair: %w", err)
	}
	enc, err := encrypted.Encrypt(der, password) // scrypt (N=32768, r=8, p=1) and secretbox, as cosign
	clear(der)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key pair: encrypting the private key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("generating key pair: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemTypeSigstore, Bytes: enc}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

// Verifier is a set of trusted public keys. A signature is accepted if any of them
// verifies it.
type Verifier struct {
	keys []trustedKey
}

type trustedKey struct {
	pub    crypto.PublicKey
	id     string // KeyID
	source string // file it came from
}

// LoadVerifier reads PEM public keys ("PUBLIC KEY" blocks, as in cosign.pub) from one
// or more files; a file may hold several keys. Anything else in a file wraps
// ErrInvalidKey: a private key given by mistake is refused, not silently used.
func LoadVerifier(ctx context.Context, pubKeyPaths ...string) (*Verifier, error) {
	if len(pubKeyPaths) == 0 {
		return nil, fmt.Errorf("%w: no public key file given", ErrInvalidKey)
	}
	v := &Verifier{}
	for _, p := range pubKeyPaths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := readKeyFile(p)
		if err != nil {
			return nil, err
		}
		pv, err := ParseVerifier(b, p)
		if err != nil {
			return nil, err
		}
		v.keys = append(v.keys, pv.keys...)
	}
	return v, nil
}

// ParseVerifier parses PEM public keys; source names them in errors and results.
func ParseVerifier(pemBytes []byte, source string) (*Verifier, error) {
	v := &Verifier{}
	rest := pemBytes
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("public key %s: %w: PEM block %d is %q, want \"PUBLIC KEY\" (pass the .pub file, e.g. cosign.pub)", source, ErrInvalidKey, len(v.keys)+1, block.Type)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key %s: %w: key %d: %v", source, ErrInvalidKey, len(v.keys)+1, err)
		}
		if err := checkPublicKey(pub); err != nil {
			return nil, fmt.Errorf("public key %s: %w: key %d: %v", source, ErrInvalidKey, len(v.keys)+1, err)
		}
		v.keys = append(v.keys, trustedKey{pub: pub, id: keyID(block.Bytes), source: source})
	}
	if len(v.keys) == 0 {
		return nil, fmt.Errorf("public key %s: %w: no PEM \"PUBLIC KEY\" block", source, ErrInvalidKey)
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("public key %s: %w: unexpected data after the last PEM block", source, ErrInvalidKey)
	}
	return v, nil
}

// NewVerifier trusts the public keys of the given signers (for example the broker's
// own signing key); source names them in results.
func NewVerifier(source string, signers ...Signer) (*Verifier, error) {
	v := &Verifier{}
	for _, s := range signers {
		pub := s.Public()
		if err := checkPublicKey(pub); err != nil {
			return nil, fmt.Errorf("public key of %s: %w: %v", source, ErrInvalidKey, err)
		}
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, fmt.Errorf("public key of %s: %w", source, err)
		}
		v.keys = append(v.keys, trustedKey{pub: pub, id: keyID(der), source: source})
	}
	if len(v.keys) == 0 {
		return nil, fmt.Errorf("%w: no key given", ErrInvalidKey)
	}
	return v, nil
}

// KeyIDs returns the IDs of the trusted keys (see Signature.KeyID), in order.
func (v *Verifier) KeyIDs() []string {
	if v == nil {
		return nil
	}
	ids := make([]string, len(v.keys))
	for i, k := range v.keys {
		ids[i] = k.id
	}
	return ids
}

// KeyID is a public key's ID: "sha256:" and the hex sha256 of its PKIX DER encoding,
// the same value as `openssl pkey -pubin -outform DER | sha256sum`.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return keyID(der), nil
}

func keyID(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading key %s: %w", path, err)
	}
	if len(b) > maxKeyFileSize {
		return nil, fmt.Errorf("key %s: %w: more than %d bytes, not a key file", path, ErrInvalidKey, maxKeyFileSize)
	}
	return b, nil
}
