package sign

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
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
	SignatureManifest v1.Descriptor // the manifest holding Verified[0]: tagged SignatureTag(Subject), or a referrer
	Source            Source        // where SignatureManifest was found
	Verified          []Signature   // signatures that verified with a trusted key (at least one)
	Rejected          int           // distinct signature layers read that did not verify with any trusted key
}

// Source says where a signature manifest was found.
type Source string

const (
	// SourceTag: the manifest tagged SignatureTag(subject), cosign's classic place.
	SourceTag Source = "tag"
	// SourceReferrer: an OCI 1.1 referrer of the subject of artifactType
	// ArtifactTypeSignature, listed by the referrers API or the fallback tag.
	SourceReferrer Source = "referrer"
)

// Signature is one verified signature.
type Signature struct {
	Layer           v1.Descriptor // the payload blob
	KeyID           string        // ID of the trusted key that verified it (see KeyID)
	KeySource       string        // file (or source) the trusted key came from
	DockerReference string        // the identity the payload claims, e.g. "reg:5000/team/pylayer"
}

// Verify checks that the manifest described by subject carries at least one cosign
// signature that a key of v verifies and whose payload names subject.Digest: the checks
// `cosign verify --key` makes of a key-based signature without a transparency log (the
// signature over the payload's bytes, then cosign's SimpleClaimVerifier's digest claim).
// The signatures are read from the manifest tagged SignatureTag(subject.Digest) first;
// when none of those verifies (or there is no such tag), from the OCI 1.1 referrers of
// subject of artifactType ArtifactTypeSignature (referrers.go), as `cosign verify
// --experimental-oci11` reads them; Result.Source says which held the signature. An
// artifact signed in the classic way costs no more requests than before. The verdicts
// are errors.Is-able:
//
//   - ErrNoSignature: there is no signature tag and no signature referrer, or they hold
//     no signature;
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
	noTag := errors.Is(err, oci.ErrNotFound)
	if err != nil && !noTag {
		return nil, fmt.Errorf("verifying %s: %w", art, err)
	}
	t := &tally{s: s, v: v, subject: subject.Digest, res: &Result{Subject: subject.Digest}, seen: map[string]bool{}}
	if !noTag {
		if err := t.check(ctx, sm, smDesc, SourceTag); err != nil {
			return nil, fmt.Errorf("verifying %s: %w", art, err)
		}
		if len(t.res.Verified) > 0 {
			return t.res, nil
		}
	}
	refs, err := signatureReferrers(ctx, s, subject.Digest)
	if err != nil {
		return nil, fmt.Errorf("verifying %s: %w", art, err)
	}
	for _, r := range refs {
		if err := t.check(ctx, r.sm, r.desc, SourceReferrer); err != nil {
			return nil, fmt.Errorf("verifying %s: %w", art, err)
		}
	}
	if len(t.res.Verified) > 0 {
		return t.res, nil
	}
	if t.layers == 0 {
		where := "no tag " + tag
		if !noTag {
			where = "tag " + tag + " holds no signature"
		}
		if len(refs) == 0 {
			where += ", and no signature referrer"
		} else {
			where += fmt.Sprintf(", nor do its %d signature referrer(s)", len(refs))
		}
		hint := ""
		if noTag && !strings.HasPrefix(art, "oci:") {
			hint = ", or `cosign sign --key KEY --tlog-upload=false " + art + "`"
		}
		return nil, fmt.Errorf("artifact %s: %w (%s): sign it with `pylayer publish --key KEY`%s", art, ErrNoSignature, where, hint)
	}
	if len(t.copiedFrom) > 0 {
		return nil, fmt.Errorf("artifact %s: %w: a trusted key signed %s, not this digest; the signature was copied from another artifact, do not use this one",
			art, ErrPayloadMismatch, strings.Join(t.copiedFrom, ", "))
	}
	return nil, fmt.Errorf("artifact %s: %w: none of its %d signature(s) verifies with the trusted key(s) %s: add the signer's public key with --trust, or sign it with a trusted key",
		art, ErrUntrusted, t.layers, strings.Join(v.KeyIDs(), ", "))
}

// tally checks signature layers against the trusted keys, each distinct layer (payload
// digest and signature) once, wherever it was found.
type tally struct {
	s          Reader
	v          *Verifier
	subject    digest.Digest
	res        *Result
	seen       map[string]bool // payload digest and base64 signature of the layers checked
	layers     int             // distinct signature layers checked
	copiedFrom []string        // digests named by trusted signatures of other artifacts
}

// check verifies the signature layers of sm (described by desc, found at src) not
// checked yet. It returns only what it could not read.
func (t *tally) check(ctx context.Context, sm *SignatureManifest, desc v1.Descriptor, src Source) error {
	for _, l := range sm.Signatures() {
		key := string(l.Desc.Digest) + " " + l.Base64Signature
		if t.seen[key] {
			continue
		}
		t.seen[key] = true
		t.layers++
		body, err := readBlob(ctx, t.s, l.Desc, maxPayloadSize)
		if err != nil {
			return fmt.Errorf("signature payload: %w", err)
		}
		sigBytes, err := base64.StdEncoding.DecodeString(l.Base64Signature)
		if l.Base64Signature == "" || err != nil {
			t.res.Rejected++ // no or malformed signature annotation
			continue
		}
		claim := parsePayload(body)
		var ok bool
		for _, k := range t.v.keys {
			if err := ctx.Err(); err != nil {
				return err
			}
			if !verifyMessage(k.pub, body, sigBytes) {
				continue
			}
			// A good signature by a trusted key: of this artifact only if its payload
			// names this digest (cosign's SimpleClaimVerifier); else it was copied here.
			if claim.Critical.Image.DockerManifestDigest != t.subject.String() {
				t.copiedFrom = append(t.copiedFrom, claimedDigest(claim))
				continue
			}
			if len(t.res.Verified) == 0 {
				t.res.SignatureManifest, t.res.Source = desc, src
			}
			t.res.Verified = append(t.res.Verified, Signature{Layer: l.Desc, KeyID: k.id, KeySource: k.source, DockerReference: claim.Critical.Identity.DockerReference})
			ok = true
			break
		}
		if !ok {
			t.res.Rejected++
		}
	}
	return nil
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
