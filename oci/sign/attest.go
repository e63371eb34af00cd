package sign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	ggcr "github.com/google/go-containerregistry/pkg/v1"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// In-toto statement types and the predicate types pylayer attests.
const (
	// StatementTypeV01 is the _type of the in-toto statements cosign writes.
	StatementTypeV01 = "https://in-toto.io/Statement/v0.1"
	// StatementTypeV1 is the _type of in-toto v1 statements, accepted when verifying.
	StatementTypeV1 = "https://in-toto.io/Statement/v1"
	// PredicateTypeSPDX is the predicate type of an SPDX document (`cosign attest
	// --type spdxjson`).
	PredicateTypeSPDX = "https://spdx.dev/Document"
)

// Statement is an in-toto statement: what an attestation's envelope carries.
type Statement struct {
	Type          string          `json:"_type"`
	PredicateType string          `json:"predicateType"`
	Subject       []Subject       `json:"subject"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Subject is one artifact a statement is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"` // algorithm -> lowercase hex
}

// names reports the name of the subject with sha256 digest d, and whether there is one.
func (st *Statement) names(d digest.Digest) (string, bool) {
	for _, s := range st.Subject {
		if "sha256:"+s.Digest["sha256"] == d.String() {
			return s.Name, true
		}
	}
	return "", false
}

// AttestationTag is the tag of the attestation manifest of the manifest with digest d:
// sha256-<hex>.att, as cosign names it.
func AttestationTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded() + ".att"
}

// NewStatement returns the in-toto statement that predicate of predicateType makes about
// the manifest with digest subject in repository name, byte for byte as `cosign attest`
// writes it (`--type spdxjson` for PredicateTypeSPDX): compact JSON with the fields
// _type (StatementTypeV01), predicateType, subject and predicate, and the predicate
// re-encoded the way cosign re-encodes it (object keys sorted, compact, <, > and &
// escaped). A predicate already in that form is carried unchanged.
func NewStatement(subject digest.Digest, name, predicateType string, predicate []byte) ([]byte, error) {
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	if err := checkReference(name); err != nil {
		return nil, fmt.Errorf("subject name: %w", err)
	}
	if !strings.Contains(predicateType, ":") || strings.ContainsAny(predicateType, " \t\r\n") {
		return nil, fmt.Errorf("predicate type %q is not a URI", predicateType)
	}
	var pred any
	if err := json.Unmarshal(predicate, &pred); err != nil {
		return nil, fmt.Errorf("predicate is not JSON: %w", err)
	}
	st := struct {
		Type          string    `json:"_type"`
		PredicateType string    `json:"predicateType"`
		Subject       []Subject `json:"subject"`
		Predicate     any       `json:"predicate"`
	}{StatementTypeV01, predicateType, []Subject{{Name: name, Digest: map[string]string{"sha256": subject.Encoded()}}}, pred}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encoding statement: %w", err)
	}
	return b, nil
}

// parseStatement decodes an in-toto statement of either version.
func parseStatement(b []byte) (*Statement, error) {
	var st Statement
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("not an in-toto statement: %w", err)
	}
	if st.Type != StatementTypeV01 && st.Type != StatementTypeV1 {
		return nil, fmt.Errorf("statement _type %q is not %q", st.Type, StatementTypeV01)
	}
	if st.PredicateType == "" {
		return nil, errors.New("statement has no predicateType")
	}
	return &st, nil
}

// Attest signs statement (NewStatement's bytes, about subject) in a DSSE envelope with
// signer and stores it in s under AttestationTag(subject.Digest), appended to the
// attestations already there, in the layer `cosign attest` writes in tag mode: media type
// MediaTypeDSSE, annotated with the predicate type and an empty signature annotation.
// If the tag already holds an attestation of the same statement that signer's key
// verifies, nothing is written. It returns the attestation manifest's descriptor.
//
// As with Sign, nothing depends on the time, and two writers appending to one tag at
// the same moment can lose one attestation.
func Attest(ctx context.Context, s Store, subject v1.Descriptor, statement []byte, signer Signer) (v1.Descriptor, error) {
	fail := func(err error) (v1.Descriptor, error) {
		return v1.Descriptor{}, fmt.Errorf("attesting %s@%s: %w", s.Name(), subject.Digest, err)
	}
	if signer == nil {
		return fail(errors.New("no signer"))
	}
	if err := checkSubject(subject.Digest); err != nil {
		return fail(err)
	}
	st, err := parseStatement(statement)
	if err != nil {
		return fail(err)
	}
	if _, ok := st.names(subject.Digest); !ok {
		return fail(fmt.Errorf("the statement is not about %s", subject.Digest))
	}
	own, err := NewVerifier("the signer", signer)
	if err != nil {
		return fail(err)
	}
	d, _, err := appendLayer(ctx, s, AttestationTag(subject.Digest), ParseAttestationManifest,
		func(base *SignatureManifest) (bool, error) { return hasAttestation(ctx, s, base, statement, own) },
		func() (ggcr.Descriptor, []byte, error) {
			env, err := SignEnvelope(signer, PayloadTypeInToto, statement)
			if err != nil {
				return ggcr.Descriptor{}, nil, err
			}
			if len(env) > maxAttestationSize {
				return ggcr.Descriptor{}, nil, fmt.Errorf("the attestation is %d bytes, the limit is %d", len(env), maxAttestationSize)
			}
			return layerOf(env, MediaTypeDSSE, map[string]string{AnnotationPredicateType: st.PredicateType, AnnotationSignature: ""})
		})
	if err != nil {
		return fail(err)
	}
	return d, nil
}
