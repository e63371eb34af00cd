package sign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Signatures as OCI 1.1 referrers, as `cosign sign --registry-referrers-mode=oci-1-1`
// writes them and `cosign verify --experimental-oci11` reads them (cosign v2.6.5,
// pkg/oci/remote.WriteSignaturesExperimentalOCI): the signature manifest, with its
// config's media type and its artifactType set to ArtifactTypeSignature and a subject
// naming the signed manifest, stored by digest. A registry with the referrers API
// (GET /v2/<name>/referrers/<digest>) lists it; for one without it (and in an OCI
// layout) the writer appends its descriptor to the image index tagged FallbackTag,
// the referrers tag schema of the OCI distribution spec 1.1, as go-containerregistry
// does for cosign.

// ArtifactTypeSignature is the artifactType, and config media type, of a cosign
// signature stored as an OCI 1.1 referrer.
const ArtifactTypeSignature = "application/vnd.dev.cosign.artifact.sig.v1+json"

// maxSignatureReferrers bounds the signature referrers of one manifest that Verify reads.
const maxSignatureReferrers = 64

// ReferrersLister is a Reader that can ask its registry for the referrers of a manifest
// through the referrers API of the OCI distribution spec 1.1. Referrers returns the
// descriptors of the manifests whose subject is the manifest with digest subject, each
// with its artifactType, or an error wrapping oci.ErrNotFound when the registry has no
// referrers API: the referrers are then read from the image index tagged
// FallbackTag(subject), as they are from a Reader without this method (an OCI layout).
// registry.Repo implements it for a remote registry.
type ReferrersLister interface {
	Referrers(ctx context.Context, subject digest.Digest) ([]v1.Descriptor, error)
}

// FallbackTag is the tag of the image index listing the referrers of the manifest with
// digest d where there is no referrers API: sha256-<hex>, the OCI distribution spec's
// referrers tag schema.
func FallbackTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded()
}

// referrerList is what listReferrers found.
type referrerList struct {
	descs []v1.Descriptor
	// api: the registry's referrers API listed them, and indexes what is pushed. Else
	// they come from the index tagged FallbackTag, which a writer must update.
	api   bool
	index *ggcr.IndexManifest // the fallback tag's index; nil if api or the tag is missing
}

// listReferrers lists the referrers of the manifest with digest subject: through the
// referrers API when s has one, else from the index tagged FallbackTag(subject).
func listReferrers(ctx context.Context, s Reader, subject digest.Digest) (referrerList, error) {
	if rl, ok := s.(ReferrersLister); ok {
		descs, err := rl.Referrers(ctx, subject)
		if err == nil {
			return referrerList{descs: descs, api: true}, nil
		}
		if !errors.Is(err, oci.ErrNotFound) {
			return referrerList{}, fmt.Errorf("listing the referrers of %s: %w", subject, err)
		}
	}
	tag := FallbackTag(subject)
	d, err := s.Resolve(ctx, tag)
	if errors.Is(err, oci.ErrNotFound) {
		return referrerList{}, nil
	}
	if err != nil {
		return referrerList{}, fmt.Errorf("resolving %s: %w", tag, err)
	}
	raw, err := readManifest(ctx, s, d, tag)
	if err != nil {
		return referrerList{}, err
	}
	idx, err := parseFallbackIndex(raw)
	if err != nil {
		return referrerList{}, fmt.Errorf("tag %s: %w (it is not a referrers index; delete the tag, then sign again)", tag, err)
	}
	l := referrerList{index: idx}
	for _, m := range idx.Manifests {
		d := toSpec(m)
		d.ArtifactType = m.ArtifactType
		l.descs = append(l.descs, d)
	}
	return l, nil
}

// readManifest reads the manifest d that tag resolved to and checks its size and digest.
func readManifest(ctx context.Context, s Reader, d v1.Descriptor, tag string) ([]byte, error) {
	if d.Size > maxManifestSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidSignatureManifest, tag, d.Size, maxManifestSize)
	}
	raw, err := s.Manifest(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", tag, err)
	}
	if digest.FromBytes(raw) != d.Digest {
		return nil, fmt.Errorf("reading %s: %w: manifest bytes do not hash to %s", tag, oci.ErrDigestMismatch, d.Digest)
	}
	return raw, nil
}

// parseFallbackIndex decodes the image index of a referrers tag, with the checks
// go-containerregistry makes before it appends to one.
func parseFallbackIndex(raw []byte) (*ggcr.IndexManifest, error) {
	var idx ggcr.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	if idx.SchemaVersion != 2 {
		return nil, fmt.Errorf("schemaVersion is %d, want 2", idx.SchemaVersion)
	}
	if idx.MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("mediaType is %q, want %q", idx.MediaType, types.OCIImageIndex)
	}
	for i, m := range idx.Manifests {
		if m.Digest.Algorithm != "sha256" {
			return nil, fmt.Errorf("manifest %d: digest %q is not sha256", i, m.Digest.String())
		}
	}
	return &idx, nil
}

// fallbackIndex returns the bytes of the referrers index base (nil: none yet) with add
// appended, sorted by digest, as go-containerregistry's remote.Write updates it.
func fallbackIndex(base *ggcr.IndexManifest, add ggcr.Descriptor) ([]byte, error) {
	im := ggcr.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	if base != nil {
		im = *base.DeepCopy()
	}
	im.Manifests = append(im.Manifests, add)
	sort.Slice(im.Manifests, func(i, j int) bool { return im.Manifests[i].Digest.String() < im.Manifests[j].Digest.String() })
	b, err := json.Marshal(im)
	if err != nil {
		return nil, fmt.Errorf("encoding the referrers index: %w", err)
	}
	return b, nil
}

// referrerManifest returns the OCI 1.1 referrer form of the signature manifest raw (the
// manifest tagged SignatureTag) of the manifest subject, byte for byte as cosign's
// WriteSignaturesExperimentalOCI writes it: the same config blob and layers, the
// config's media type and the artifactType set to ArtifactTypeSignature, and a subject
// of the media type, size and digest a HEAD of the signed manifest reports.
func referrerManifest(raw []byte, subject ggcr.Descriptor) ([]byte, error) {
	var m ggcr.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalidSignatureManifest, err)
	}
	m.MediaType = types.OCIManifestSchema1 // subject and artifactType are OCI's alone
	m.Config.MediaType = ArtifactTypeSignature
	m.Subject = &subject
	m.ArtifactType = ArtifactTypeSignature
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the referrer manifest: %w", err)
	}
	return b, nil
}

// subjectOf is the subject descriptor of a referrer of d: its media type, size and
// digest, read from s when d lacks the media type or the size.
func subjectOf(ctx context.Context, s Reader, d v1.Descriptor) (ggcr.Descriptor, error) {
	if d.MediaType == "" || d.Size <= 0 {
		raw, err := s.Manifest(ctx, v1.Descriptor{MediaType: d.MediaType, Digest: d.Digest})
		if err != nil {
			return ggcr.Descriptor{}, fmt.Errorf("reading the signed manifest: %w", err)
		}
		if digest.FromBytes(raw) != d.Digest {
			return ggcr.Descriptor{}, fmt.Errorf("reading the signed manifest: %w: its bytes do not hash to %s", oci.ErrDigestMismatch, d.Digest)
		}
		d.Size = int64(len(raw))
		if d.MediaType == "" {
			var m struct {
				MediaType string `json:"mediaType"`
			}
			if json.Unmarshal(raw, &m) == nil && m.MediaType != "" {
				d.MediaType = m.MediaType
			} else {
				d.MediaType = v1.MediaTypeImageManifest
			}
		}
	}
	h, err := ggcr.NewHash(d.Digest.String())
	if err != nil {
		return ggcr.Descriptor{}, fmt.Errorf("%w: %v", oci.ErrInvalidDigest, err)
	}
	return ggcr.Descriptor{MediaType: types.MediaType(d.MediaType), Size: d.Size, Digest: h}, nil
}

// putReferrer stores the signature manifest raw of subject as its OCI 1.1 referrer,
// unless the referrers of subject list it already: the referrer manifest by digest, its
// config and layers being those of raw, already pushed; then, when the registry has no
// referrers API, the fallback index with its descriptor appended. It returns the
// referrer's descriptor.
func putReferrer(ctx context.Context, s Store, subject v1.Descriptor, raw []byte) (v1.Descriptor, error) {
	subj, err := subjectOf(ctx, s, subject)
	if err != nil {
		return v1.Descriptor{}, err
	}
	body, err := referrerManifest(raw, subj)
	if err != nil {
		return v1.Descriptor{}, err
	}
	want := digest.FromBytes(body)
	listed, err := listReferrers(ctx, s, subject.Digest)
	if err != nil {
		return v1.Descriptor{}, err
	}
	for _, d := range listed.descs {
		if d.Digest == want {
			return d, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return v1.Descriptor{}, err
	}
	d, err := s.PushManifest(ctx, body, v1.MediaTypeImageManifest, "")
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("pushing the referrer manifest: %w", err)
	}
	d.ArtifactType = ArtifactTypeSignature
	if listed.api {
		return d, nil
	}
	h, err := ggcr.NewHash(want.String())
	if err != nil {
		return v1.Descriptor{}, err
	}
	idx, err := fallbackIndex(listed.index, ggcr.Descriptor{
		MediaType: types.OCIManifestSchema1, Size: int64(len(body)), Digest: h, ArtifactType: ArtifactTypeSignature,
	})
	if err != nil {
		return v1.Descriptor{}, err
	}
	tag := FallbackTag(subject.Digest)
	if _, err := s.PushManifest(ctx, idx, v1.MediaTypeImageIndex, tag); err != nil {
		return v1.Descriptor{}, fmt.Errorf("pushing the referrers index %s: %w", tag, err)
	}
	return d, nil
}

// signatureReferrer is one signature manifest found among the referrers of a manifest.
type signatureReferrer struct {
	desc v1.Descriptor
	sm   *SignatureManifest
}

// signatureReferrers reads the referrers of subject whose artifactType is
// ArtifactTypeSignature, in the order listed. Trust comes from the signatures inside,
// which name the digest they sign, never from the listing or the referrer's subject.
func signatureReferrers(ctx context.Context, s Reader, subject digest.Digest) ([]signatureReferrer, error) {
	l, err := listReferrers(ctx, s, subject)
	if err != nil {
		return nil, err
	}
	var out []signatureReferrer
	for _, d := range l.descs {
		if d.ArtifactType != ArtifactTypeSignature {
			continue
		}
		if len(out) == maxSignatureReferrers {
			return nil, fmt.Errorf("%s has more than %d signature referrers, the limit: remove the ones no longer needed", subject, maxSignatureReferrers)
		}
		what := "signature referrer " + d.Digest.String()
		if err := checkSubject(d.Digest); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		raw, err := readManifest(ctx, s, d, what)
		if err != nil {
			return nil, err
		}
		sm, err := ParseSignatureManifest(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, signatureReferrer{desc: v1.Descriptor{MediaType: d.MediaType, ArtifactType: d.ArtifactType, Digest: d.Digest, Size: int64(len(raw))}, sm: sm})
	}
	return out, nil
}
