package sign

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
)

// Signer signs with a private key: a crypto.Signer whose public key is ECDSA, RSA or
// Ed25519, as cosign's key-based signing supports. LoadSigner gives one for a cosign key
// file; a KMS or HSM client that implements crypto.Signer is one too.
type Signer = crypto.Signer

// signMessage signs msg the way cosign's key-based signers do: ECDSA (ASN.1) and RSA
// (PKCS #1 v1.5) over its SHA-256 digest, Ed25519 over the message itself.
func signMessage(s Signer, msg []byte) ([]byte, error) {
	switch s.Public().(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey:
		d := sha256.Sum256(msg)
		return s.Sign(rand.Reader, d[:], crypto.SHA256)
	case ed25519.PublicKey:
		return s.Sign(rand.Reader, msg, crypto.Hash(0))
	default:
		return nil, fmt.Errorf("%w: a %T key cannot sign (want ECDSA, RSA or Ed25519)", ErrInvalidKey, s.Public())
	}
}

// verifyMessage reports whether sig is pub's signature of msg, as signMessage makes it
// and `cosign verify --key` checks it (SHA-256 for every key type).
func verifyMessage(pub crypto.PublicKey, msg, sig []byte) bool {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		return ecdsa.VerifyASN1(k, d[:], sig)
	case *rsa.PublicKey:
		d := sha256.Sum256(msg)
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, d[:], sig) == nil
	case ed25519.PublicKey:
		return len(k) == ed25519.PublicKeySize && ed25519.Verify(k, msg, sig)
	}
	return false
}

// checkPublicKey refuses key types cosign does not verify with.
func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("an RSA key of %d bits is too small (want at least 2048)", k.N.BitLen())
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("a %T key is not supported (want ECDSA, RSA or Ed25519)", pub)
}
