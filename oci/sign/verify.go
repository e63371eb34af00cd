package sign

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pylayer/pylayer/oci"
)

var (
	// ErrNoSignature: the artifact has no signature at all.
	ErrNoSignature = errors.New("artifact is not signed")
	// ErrUntrusted: the artifact has signatures, but none verifies with a trusted key.
	ErrUntrusted = errors.New("signed, but by no trusted key")
	// ErrPayloadMismatch: a trusted key signed a payload naming another digest, i.e. a
	// signature was copied from another artifact onto this one.
	ErrPayloadMismatch = errors.New("signature is for another artifact")
)

// Result describes a successful verification.
type Result struct {
	Subject           digest.Digest // the verified manifest digest
	SignatureManifest v1.Descriptor // the manifest tagged SignatureTag(Subject)
	Verified          []Signature   // signatures that verified with a trusted key (at least one)
	Rejected          int           // signature layers that did not verify with any trusted key
}

// Signature is one verified signature.
type Signature struct {
	Layer           v1.Descriptor // the payload blob
	KeyID           string        // ID of the trusted key that verified it (see KeyID)
	KeySource       string        // file (or source) the trusted key came from
	DockerReference string        // the identity the payload claims, e.g. "reg:5000/team/pylayer"
}

// Verify checks that the manifest described by subject carries at least one cosign
// signature, in the manifest tagged SignatureTag(subject.Digest), that a key of v
// verifies and whose payload names subject.Digest: the checks `cosign verify --key`
// makes of a key-based signature without a transparency log (the signature over the
// payload's bytes, then cosign's SimpleClaimVerifier's digest claim). The verdicts are
// errors.Is-able:
//
//   - ErrNoSignature: there is no signature tag, or it holds no signature;
//   - ErrPayloadMismatch: no signature verified, and a trusted key's signature names
//     another digest (it was copied here);
//   - ErrUntrusted: no signature verified with any trusted key;
//
// Any failure to read the signatures (network, a blob that does not match its digest,
// a tag that is not a signature manifest) is returned as it is: Verify never succeeds
// on what it could not read.
func Verify(ctx context.Context, s Reader, subject v1.Descriptor, v *Verifier) (*Result, error) {
	if err := checkSubject(subject.Digest); err != nil {
		return nil, fmt.Errorf("verifying: %w", err)
	}
	if v == nil || len(v.keys) == 0 {
		return nil, fmt.Errorf("verifying %s@%s: no trusted public key given", s.Name(), subject.Digest)
	}
	art := s.Name() + "@" + subject.Digest.String()
	tag := SignatureTag(subject.Digest)
	sm, smDesc, err := readSignatureManifest(ctx, s, tag)
	if errors.Is(err, oci.ErrNotFound) {
		hint := ""
		if !strings.HasPrefix(art, "oci:") {
			hint = ", or `cosign sign --key KEY --tlog-upload=false " + art + "`"
		}
		return nil, fmt.Errorf("artifact %s: %w (no tag %s): sign it with `pylayer publish --key KEY`%s", art, ErrNoSignature, tag, hint)
	}
	if err != nil {
		return nil, fmt.Errorf("verifying %s: %w", art, err)
	}
	layers := sm.Signatures()
	if len(layers) == 0 {
		return nil, fmt.Errorf("artifact %s: %w (tag %s holds no signature): sign it with `pylayer publish --key KEY`", art, ErrNoSignature, tag)
	}
	res := &Result{Subject: subject.Digest, SignatureManifest: smDesc}
	var copiedFrom []string // digests named by trusted signatures of other artifacts
	for _, l := range layers {
		body, err := readBlob(ctx, s, l.Desc, maxPayloadSize)
		if err != nil {
			return nil, fmt.Errorf("verifying %s: signature payload: %w", art, err)
		}
		sigBytes, err := base64.StdEncoding.DecodeString(l.Base64Signature)
		if l.Base64Signature == "" || err != nil {
			res.Rejected++ // no or malformed signature annotation
			continue
		}
		claim := parsePayload(body)
		var ok bool
		for _, k := range v.keys {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if !verifyMessage(k.pub, body, sigBytes) {
				continue
			}
			// A good signature by a trusted key: of this artifact only if its payload
			// names this digest (cosign's SimpleClaimVerifier); else it was copied here.
			if claim.Critical.Image.DockerManifestDigest != subject.Digest.String() {
				copiedFrom = append(copiedFrom, claimedDigest(claim))
				continue
			}
			res.Verified = append(res.Verified, Signature{Layer: l.Desc, KeyID: k.id, KeySource: k.source, DockerReference: claim.Critical.Identity.DockerReference})
			ok = true
			break
		}
		if !ok {
			res.Rejected++
		}
	}
	if len(res.Verified) > 0 {
		return res, nil
	}
	if len(copiedFrom) > 0 {
		return nil, fmt.Errorf("artifact %s: %w: a trusted key signed %s, not this digest; the signature was copied from another artifact, do not use this one",
			art, ErrPayloadMismatch, strings.Join(copiedFrom, ", "))
	}
	return nil, fmt.Errorf("artifact %s: %w: none of its %d signature(s) verifies with the trusted key(s) %s: add the signer's public key with --trust, or sign it with a trusted key",
		art, ErrUntrusted, len(layers), strings.Join(v.KeyIDs(), ", "))
}

// parsePayload decodes a simple signing payload; what does not decode names nothing.
func parsePayload(body []byte) simpleSigning {
	var p simpleSigning
	_ = json.Unmarshal(body, &p)
	return p
}

func claimedDigest(p simpleSigning) string {
	d := p.Critical.Image.DockerManifestDigest
	if d == "" {
		return "a payload naming no digest"
	}
	return fmt.Sprintf("%q", d)
}
