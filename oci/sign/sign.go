package sign

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Reader is the read-only part of a repository that verification needs; Verify takes
// nothing more, so a caller can verify from a store it may not write to.
//
// Resolve must return an error wrapping oci.ErrNotFound for a tag that does not exist
// (and only then): that is how an unsigned artifact is told apart from a failure.
// Manifest and Blob must verify what they return against the descriptor's digest.
type Reader interface {
	// Name is the repository, e.g. "127.0.0.1:5000/team/pylayer" or "oci:/abs/dir".
	Name() string
	Resolve(ctx context.Context, tag string) (v1.Descriptor, error)
	Manifest(ctx context.Context, d v1.Descriptor) ([]byte, error)
	Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error)
}

// Store is the part of a repository that signing needs: Reader, and the pushes.
// PushManifest with tag "" stores the manifest by digest only (a referrer).
// registry.Repo (a remote registry or an OCI layout) satisfies it.
type Store interface {
	Reader
	PushBlob(ctx context.Context, d v1.Descriptor, open func() (io.ReadCloser, error)) (bool, error)
	PushManifest(ctx context.Context, raw []byte, mediaType, tag string) (v1.Descriptor, error)
}

// SignatureTag is the tag of the signature manifest of the manifest with digest d:
// sha256-<hex>.sig, as cosign names it.
func SignatureTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded() + ".sig"
}

// cosignSignatureType is the type a simple signing payload of a cosign signature names.
const cosignSignatureType = "cosign container image signature"

// simpleSigning is a "simple signing" payload (containers/image's format) as cosign
// writes it; its field order is the order cosign's bytes have.
type simpleSigning struct {
	Critical critical       `json:"critical"`
	Optional map[string]any `json:"optional"`
}

type critical struct {
	Identity identity `json:"identity"`
	Image    image    `json:"image"`
	Type     string   `json:"type"`
}

type identity struct {
	DockerReference string `json:"docker-reference"`
}

type image struct {
	DockerManifestDigest string `json:"docker-manifest-digest"`
}

// Payload returns the simple signing payload that a signature of subject carries,
// byte for byte as cosign writes it:
//
//	{"critical":{"identity":{"docker-reference":REF},"image":{"docker-manifest-digest":DIGEST},"type":"cosign container image signature"},"optional":null}
func Payload(subject digest.Digest, dockerReference string) ([]byte, error) {
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	if err := checkReference(dockerReference); err != nil {
		return nil, err
	}
	p := simpleSigning{Critical: critical{
		Identity: identity{DockerReference: dockerReference},
		Image:    image{DockerManifestDigest: subject.String()},
		Type:     cosignSignatureType,
	}}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding signature payload: %w", err)
	}
	return b, nil
}

// Sign signs the manifest described by subject and stores the signature in s under
// SignatureTag(subject.Digest), appending it to the signatures already there (the
// manifest bytes are what cosign's own `cosign sign` would write). dockerReference is
// the identity the payload claims, "" for s.Name(). If the tag already holds a
// signature of the same payload that signer's key verifies, nothing is written to it
// (the same duplicate rule cosign applies). It returns the signature manifest's
// descriptor.
//
// The manifest now tagged is also stored as an OCI 1.1 referrer of subject
// (referrers.go), as `cosign sign --registry-referrers-mode=oci-1-1` stores it, so that
// referrers-aware tools see the signatures; a referrer already listed is not written
// again, so signing again completes an earlier Sign that failed half way.
//
// Nothing depends on the time. Two signers appending to one tag at the same moment can
// lose one signature (registries have no compare-and-swap); sign from one place.
func Sign(ctx context.Context, s Store, subject v1.Descriptor, dockerReference string, signer Signer) (v1.Descriptor, error) {
	if signer == nil {
		return v1.Descriptor{}, errors.New("signing: no signer")
	}
	if dockerReference == "" {
		dockerReference = s.Name()
	}
	body, err := Payload(subject.Digest, dockerReference)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("signing: %w", err)
	}
	tag := SignatureTag(subject.Digest)
	d, raw, err := appendLayer(ctx, s, tag, ParseSignatureManifest,
		func(base *SignatureManifest) (bool, error) { return findDuplicate(base, body, signer), nil },
		func() (ggcr.Descriptor, []byte, error) {
			sig, err := signMessage(signer, body)
			if err != nil {
				return ggcr.Descriptor{}, nil, fmt.Errorf("signing payload: %w", err)
			}
			return layerOf(body, MediaTypeSimpleSigning, map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)})
		})
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("signing %s@%s: %w", s.Name(), subject.Digest, err)
	}
	if _, err := putReferrer(ctx, s, subject, raw); err != nil {
		return v1.Descriptor{}, fmt.Errorf("signing %s@%s: the signature is stored under tag %s, but not as an OCI 1.1 referrer: %w (sign again to retry)",
			s.Name(), subject.Digest, tag, err)
	}
	return d, nil
}

// layerOf is the descriptor of a layer holding body, and body.
func layerOf(body []byte, mediaType types.MediaType, annotations map[string]string) (ggcr.Descriptor, []byte, error) {
	h, _, err := ggcr.SHA256(bytes.NewReader(body))
	if err != nil {
		return ggcr.Descriptor{}, nil, err
	}
	return ggcr.Descriptor{MediaType: mediaType, Size: int64(len(body)), Digest: h, Annotations: annotations}, body, nil
}

// appendLayer appends the layer makeLayer returns (its descriptor and bytes) to the
// cosign manifest tagged tag (a new one when the tag is missing), parsed with parse, as
// cosign's mutate.AppendSignatures does, and pushes the layer, the config and the
// manifest. When dup reports that the existing manifest holds the layer already, nothing
// is written and its descriptor is returned. makeLayer (which signs) is called only when
// a layer is to be written. It returns the descriptor and bytes of the manifest tagged.
func appendLayer(ctx context.Context, s Store, tag string, parse func([]byte) (*SignatureManifest, error),
	dup func(*SignatureManifest) (bool, error), makeLayer func() (ggcr.Descriptor, []byte, error)) (v1.Descriptor, []byte, error) {
	base, baseDesc, err := readCosignManifest(ctx, s, tag, parse)
	if err != nil && !errors.Is(err, oci.ErrNotFound) {
		return v1.Descriptor{}, nil, err
	}
	var baseConfig []byte
	if base != nil {
		if d := base.Config(); d.MediaType == string(types.OCIConfigJSON) || d.MediaType == string(types.DockerConfigJSON) {
			if baseConfig, err = readBlob(ctx, s, d, maxManifestSize); err != nil {
				return v1.Descriptor{}, nil, fmt.Errorf("reading config of %s: %w", tag, err)
			}
		}
		found, err := dup(base)
		if err != nil {
			return v1.Descriptor{}, nil, err
		}
		if found {
			return baseDesc, base.raw, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return v1.Descriptor{}, nil, err
	}
	layer, body, err := makeLayer()
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	manifest, config, err := appendSignature(base, baseConfig, layer)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	mediaType := string(types.OCIManifestSchema1)
	if base != nil {
		mediaType = base.MediaType()
	}
	sm, err := parse(manifest)
	if err != nil {
		return v1.Descriptor{}, nil, err // cannot happen: appendSignature writes what the parser accepts
	}
	for _, blob := range []struct {
		d v1.Descriptor
		b []byte
	}{{toSpec(layer), body}, {sm.Config(), config}} {
		if blob.b == nil {
			continue // a config that is not an image config is kept as it is
		}
		blob.d.Annotations = nil
		if _, err := s.PushBlob(ctx, blob.d, func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(blob.b)), nil
		}); err != nil {
			return v1.Descriptor{}, nil, fmt.Errorf("pushing blob %s: %w", blob.d.Digest, err)
		}
	}
	d, err := s.PushManifest(ctx, manifest, mediaType, tag)
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("pushing %s: %w", tag, err)
	}
	return d, manifest, nil
}

// findDuplicate reports whether base already holds a signature of body that the
// signer's own key verifies.
func findDuplicate(base *SignatureManifest, body []byte, signer Signer) bool {
	want := digest.FromBytes(body)
	for _, l := range base.Signatures() {
		if l.Desc.Digest != want || len(l.Desc.Annotations) != 1 {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(l.Base64Signature)
		if err != nil {
			continue
		}
		if verifyMessage(signer.Public(), body, sig) {
			return true
		}
	}
	return false
}

// readSignatureManifest resolves and parses the signature manifest tagged tag. A
// missing tag returns an error wrapping oci.ErrNotFound.
func readSignatureManifest(ctx context.Context, s Reader, tag string) (*SignatureManifest, v1.Descriptor, error) {
	return readCosignManifest(ctx, s, tag, ParseSignatureManifest)
}

// readCosignManifest resolves the manifest tagged tag and parses it with parse.
func readCosignManifest(ctx context.Context, s Reader, tag string, parse func([]byte) (*SignatureManifest, error)) (*SignatureManifest, v1.Descriptor, error) {
	d, err := s.Resolve(ctx, tag)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("resolving %s: %w", tag, err)
	}
	raw, err := readManifest(ctx, s, d, tag)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	sm, err := parse(raw)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("tag %s: %w (it is not a cosign signature manifest; delete the tag to sign again)", tag, err)
	}
	return sm, d, nil
}

// readBlob reads a blob of at most limit bytes and checks its size and digest, whether
// or not the store already did.
func readBlob(ctx context.Context, s Reader, d v1.Descriptor, limit int64) ([]byte, error) {
	if d.Size < 0 || d.Size > limit {
		return nil, fmt.Errorf("blob %s: size %d is not between 0 and %d", d.Digest, d.Size, limit)
	}
	rc, err := s.Blob(ctx, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(oci.NewVerifyReader(rc, d))
	if err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", d.Digest, err)
	}
	return b, nil
}

func checkSubject(d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: subject %q: %v", oci.ErrInvalidDigest, string(d), err)
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%w: subject %q: only sha256 digests are supported", oci.ErrInvalidDigest, string(d))
	}
	return nil
}

func checkReference(ref string) error {
	if ref == "" || len(ref) > 1024 {
		return fmt.Errorf("docker reference %q: must be 1 to 1024 characters", ref)
	}
	for _, r := range ref {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("docker reference %q: must not contain spaces or control characters", ref)
		}
	}
	return nil
}
