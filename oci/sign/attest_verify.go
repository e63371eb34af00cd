package sign

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// ErrNoAttestation: the artifact has no attestation of the predicate type asked for.
var ErrNoAttestation = errors.New("artifact has no attestation")

// AttestationResult describes a successful verification of attestations.
type AttestationResult struct {
	Subject             digest.Digest // the attested manifest digest
	AttestationManifest v1.Descriptor // the manifest tagged AttestationTag(Subject)
	Verified            []Attestation // of the predicate type asked for, in manifest order (at least one)
	Rejected            int           // attestation layers that no trusted key signed, or that are malformed
}

// Attestation is one verified attestation.
type Attestation struct {
	Layer       v1.Descriptor // the envelope blob
	Statement   Statement     // the signed statement; Statement.Predicate is its predicate, as signed
	SubjectName string        // the name the statement gives the subject, e.g. "reg:5000/team/pylayer"
	KeyID       string        // ID of the trusted key that verified it (see KeyID)
	KeySource   string        // file (or source) the trusted key came from
}

// Last is the attestation appended last: the newest, when an artifact was attested again.
func (r *AttestationResult) Last() Attestation { return r.Verified[len(r.Verified)-1] }

// VerifyAttestations returns the attestations of predicateType about the manifest
// described by subject, in the manifest tagged AttestationTag(subject.Digest), that a
// key of v signed: the checks `cosign verify-attestation --key --type` makes without a
// transparency log (a DSSE envelope of an in-toto statement whose signature over the
// PAE a trusted key verifies, then a subject with this sha256 digest, then the
// statement's own predicateType, never the unsigned layer annotation). The verdicts are
// errors.Is-able:
//
//   - ErrNoAttestation: there is no attestation tag, it holds no attestation, or the
//     trusted attestations about this artifact are all of other predicate types;
//   - ErrPayloadMismatch: a trusted key's attestation names another digest (copied here);
//   - ErrUntrusted: no attestation verifies with any trusted key.
//
// As Verify does, any failure to read the attestations is returned as it is.
func VerifyAttestations(ctx context.Context, s Reader, subject v1.Descriptor, predicateType string, v *Verifier) (*AttestationResult, error) {
	if err := checkSubject(subject.Digest); err != nil {
		return nil, fmt.Errorf("verifying attestations: %w", err)
	}
	if v == nil || len(v.keys) == 0 {
		return nil, fmt.Errorf("verifying attestations of %s@%s: no trusted public key given", s.Name(), subject.Digest)
	}
	art := s.Name() + "@" + subject.Digest.String()
	tag := AttestationTag(subject.Digest)
	hint := "attest it with `pylayer publish --key KEY`"
	sm, smDesc, err := readCosignManifest(ctx, s, tag, ParseAttestationManifest)
	if errors.Is(err, oci.ErrNotFound) {
		return nil, fmt.Errorf("artifact %s: %w (no tag %s): %s", art, ErrNoAttestation, tag, hint)
	}
	if err != nil {
		return nil, fmt.Errorf("verifying attestations of %s: %w", art, err)
	}
	layers := sm.Attestations()
	if len(layers) == 0 {
		return nil, fmt.Errorf("artifact %s: %w (tag %s holds none): %s", art, ErrNoAttestation, tag, hint)
	}
	res := &AttestationResult{Subject: subject.Digest, AttestationManifest: smDesc}
	var copiedFrom []string         // digests named by trusted attestations of other artifacts
	otherTypes := map[string]bool{} // predicate types of trusted attestations of this artifact
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		body, err := readBlob(ctx, s, l, maxAttestationSize)
		if err != nil {
			return nil, fmt.Errorf("verifying attestations of %s: envelope: %w", art, err)
		}
		env, payload, err := ParseEnvelope(body)
		if err != nil || env.PayloadType != PayloadTypeInToto {
			res.Rejected++
			continue
		}
		k := env.verifiedBy(v, payload)
		if k == nil {
			res.Rejected++
			continue
		}
		st, err := parseStatement(payload)
		if err != nil {
			res.Rejected++ // signed by a trusted key, but not a statement
			continue
		}
		name, ok := st.names(subject.Digest)
		if !ok {
			copiedFrom = append(copiedFrom, statementDigests(st))
			continue
		}
		if st.PredicateType != predicateType {
			otherTypes[st.PredicateType] = true
			continue
		}
		res.Verified = append(res.Verified, Attestation{Layer: l, Statement: *st, SubjectName: name, KeyID: k.id, KeySource: k.source})
	}
	switch {
	case len(res.Verified) > 0:
		return res, nil
	case len(otherTypes) > 0:
		types := make([]string, 0, len(otherTypes))
		for t := range otherTypes {
			types = append(types, t)
		}
		sort.Strings(types)
		return nil, fmt.Errorf("artifact %s: %w of type %s, only of %s: %s", art, ErrNoAttestation, predicateType, strings.Join(types, ", "), hint)
	case len(copiedFrom) > 0:
		return nil, fmt.Errorf("artifact %s: %w: a trusted key attested %s, not this digest; the attestation was copied from another artifact, do not use this one",
			art, ErrPayloadMismatch, strings.Join(copiedFrom, ", "))
	}
	return nil, fmt.Errorf("artifact %s: %w: none of its %d attestation(s) verifies with the trusted key(s) %s: add the signer's public key with --trust, or attest it with a trusted key",
		art, ErrUntrusted, len(layers), strings.Join(v.KeyIDs(), ", "))
}

// statementDigests names the subjects of a statement for an error message.
func statementDigests(st *Statement) string {
	var ds []string
	for _, s := range st.Subject {
		if h := s.Digest["sha256"]; h != "" {
			ds = append(ds, fmt.Sprintf("%q", "sha256:"+h))
		}
	}
	if len(ds) == 0 {
		return "a statement naming no sha256 digest"
	}
	return strings.Join(ds, ", ")
}

// hasAttestation reports whether base holds an attestation of exactly statement that a
// key of own signed: Attest's duplicate rule. Only layers whose unsigned annotation
// names the statement's predicate type are read.
func hasAttestation(ctx context.Context, s Reader, base *SignatureManifest, statement []byte, own *Verifier) (bool, error) {
	st, err := parseStatement(statement)
	if err != nil {
		return false, err
	}
	for _, l := range base.Attestations() {
		if l.Annotations[AnnotationPredicateType] != st.PredicateType {
			continue
		}
		body, err := readBlob(ctx, s, l, maxAttestationSize)
		if err != nil {
			return false, fmt.Errorf("reading attestation %s: %w", l.Digest, err)
		}
		env, payload, err := ParseEnvelope(body)
		if err != nil || env.PayloadType != PayloadTypeInToto || !bytes.Equal(payload, statement) {
			continue
		}
		if env.verifiedBy(own, payload) != nil {
			return true, nil
		}
	}
	return false, nil
}
