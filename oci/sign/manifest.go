package sign

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Formats of cosign's classic signatures.
const (
	// MediaTypeSimpleSigning is the media type of a signature layer: a simple signing
	// payload naming the signed manifest digest.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationSignature holds a signature layer's base64 signature of its bytes. An
	// attestation layer carries it empty: its signature is inside the envelope.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// MediaTypeDSSE is the media type of an attestation layer: a DSSE envelope whose
	// payload is an in-toto statement.
	MediaTypeDSSE = "application/vnd.dsse.envelope.v1+json"
	// AnnotationPredicateType names an attestation layer's predicate type, as `cosign
	// attest` writes it. It is not signed: only the statement's own is trusted.
	AnnotationPredicateType = "predicateType"
)

const (
	// maxSignatureLayers is cosign's own limit on signatures per manifest.
	maxSignatureLayers = 1000
	// maxPayloadSize bounds one signature payload. Simple signing payloads are a few
	// hundred bytes; cosign's own limit (128 MiB) is far more than any needs.
	maxPayloadSize = 1 << 20
	// maxAttestationSize bounds one attestation envelope. An SBOM of a few hundred
	// wheels with their license texts is a few MiB at most; cosign allows 128 MiB.
	maxAttestationSize = 32 << 20
	// maxManifestSize bounds manifests and config blobs read here, as registries do.
	maxManifestSize = 4 << 20
)

// ErrInvalidSignatureManifest: the sha256-<hex>.sig tag names something that is not a
// cosign signature manifest.
var ErrInvalidSignatureManifest = errors.New("invalid signature manifest")

// SignatureManifest is a parsed cosign signature manifest (the manifest tagged
// sha256-<hex>.sig).
type SignatureManifest struct {
	m   ggcr.Manifest
	raw []byte // the bytes parsed
}

// SignatureLayer is one layer of a signature manifest.
type SignatureLayer struct {
	Desc            v1.Descriptor // the payload blob, with its annotations
	Base64Signature string        // the dev.cosignproject.cosign/signature annotation ("" if absent)
}

// ParseSignatureManifest decodes and checks the bytes of a signature manifest: an OCI
// (or Docker schema 2, as cosign writes with COSIGN_DOCKER_MEDIA_TYPES=1) image
// manifest with a sha256 config digest and at most 1000 layers, each with a sha256
// digest and a size no larger than a signature payload may be. Errors wrap
// ErrInvalidSignatureManifest.
func ParseSignatureManifest(b []byte) (*SignatureManifest, error) {
	return parseCosignManifest(b, maxPayloadSize)
}

// ParseAttestationManifest is ParseSignatureManifest for the manifest tagged
// sha256-<hex>.att, whose layers may be as large as an attestation envelope may be.
func ParseAttestationManifest(b []byte) (*SignatureManifest, error) {
	return parseCosignManifest(b, maxAttestationSize)
}

func parseCosignManifest(b []byte, layerLimit int64) (*SignatureManifest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSignatureManifest, fmt.Sprintf(format, args...))
	}
	if len(b) > maxManifestSize {
		return nil, bad("%d bytes, the limit is %d", len(b), maxManifestSize)
	}
	var m ggcr.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, bad("decoding JSON: %v", err)
	}
	if m.SchemaVersion != 2 {
		return nil, bad("schemaVersion is %d, want 2", m.SchemaVersion)
	}
	if m.MediaType != types.OCIManifestSchema1 && m.MediaType != types.DockerManifestSchema2 {
		return nil, bad("mediaType is %q, want %q", m.MediaType, types.OCIManifestSchema1)
	}
	if err := checkHash(m.Config.Digest, m.Config.Size, maxManifestSize); err != nil {
		return nil, bad("config: %v", err)
	}
	if len(m.Layers) > maxSignatureLayers {
		return nil, bad("%d layers, the limit is %d", len(m.Layers), maxSignatureLayers)
	}
	for i, l := range m.Layers {
		if err := checkHash(l.Digest, l.Size, layerLimit); err != nil {
			return nil, bad("layer %d: %v", i, err)
		}
	}
	return &SignatureManifest{m: m, raw: b}, nil
}

func checkHash(h ggcr.Hash, size, limit int64) error {
	if h.Algorithm != "sha256" {
		return fmt.Errorf("digest %q is not sha256", h.String())
	}
	if size < 0 || size > limit {
		return fmt.Errorf("size %d is not between 0 and %d", size, limit)
	}
	return nil
}

// Signatures returns the manifest's signature layers: those of media type
// MediaTypeSimpleSigning. Other layers (attestations, bundles) are not signatures.
func (sm *SignatureManifest) Signatures() []SignatureLayer {
	var out []SignatureLayer
	for _, l := range sm.m.Layers {
		if string(l.MediaType) != MediaTypeSimpleSigning {
			continue
		}
		out = append(out, SignatureLayer{Desc: toSpec(l), Base64Signature: l.Annotations[AnnotationSignature]})
	}
	return out
}

// Attestations returns the manifest's attestation layers: those of media type
// MediaTypeDSSE, each with its annotations.
func (sm *SignatureManifest) Attestations() []v1.Descriptor {
	var out []v1.Descriptor
	for _, l := range sm.m.Layers {
		if string(l.MediaType) == MediaTypeDSSE {
			out = append(out, toSpec(l))
		}
	}
	return out
}

// Config is the descriptor of the manifest's config blob.
func (sm *SignatureManifest) Config() v1.Descriptor { return toSpec(sm.m.Config) }

// MediaType is the manifest's media type.
func (sm *SignatureManifest) MediaType() string { return string(sm.m.MediaType) }

func toSpec(d ggcr.Descriptor) v1.Descriptor {
	var ann map[string]string
	if len(d.Annotations) > 0 {
		ann = make(map[string]string, len(d.Annotations))
		for k, v := range d.Annotations {
			ann[k] = v
		}
	}
	return v1.Descriptor{
		MediaType:   string(d.MediaType),
		Digest:      digest.Digest(d.Digest.String()),
		Size:        d.Size,
		Annotations: ann,
	}
}

// appendSignature returns the manifest and config bytes of base (nil: cosign's empty
// signature image) with one more signature layer, exactly as cosign's
// mutate.AppendSignatures (go-containerregistry's mutate.Append) computes them: the
// layer is added to the manifest with its annotations, and for an image config its
// uncompressed digest is appended to rootfs.diff_ids with an empty history entry.
// baseConfig is the config blob of base (ignored when base is nil). config is nil when
// the config is kept unchanged (a base whose config is not an image config).
func appendSignature(base *SignatureManifest, baseConfig []byte, layer ggcr.Descriptor) (manifest, config []byte, err error) {
	var m ggcr.Manifest
	var cf *ggcr.ConfigFile
	if base == nil {
		m = ggcr.Manifest{
			SchemaVersion: 2,
			MediaType:     types.OCIManifestSchema1,
			Config:        ggcr.Descriptor{MediaType: types.OCIConfigJSON},
		}
		cf = &ggcr.ConfigFile{RootFS: ggcr.RootFS{Type: "layers"}}
	} else {
		m = *base.m.DeepCopy()
		if m.Config.MediaType == types.OCIConfigJSON || m.Config.MediaType == types.DockerConfigJSON {
			if cf, err = ggcr.ParseConfigFile(bytes.NewReader(baseConfig)); err != nil {
				return nil, nil, fmt.Errorf("%w: config: %v", ErrInvalidSignatureManifest, err)
			}
		}
	}
	if len(m.Layers) >= maxSignatureLayers {
		return nil, nil, fmt.Errorf("%w: already %d layers, the limit is %d", ErrInvalidSignatureManifest, len(m.Layers), maxSignatureLayers)
	}
	if cf != nil {
		// A signature layer is not compressed: its diff ID is its digest.
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, layer.Digest)
		cf.History = append(cf.History, ggcr.History{})
		if config, err = json.Marshal(cf); err != nil {
			return nil, nil, fmt.Errorf("encoding signature config: %w", err)
		}
		h, _, err := ggcr.SHA256(bytes.NewReader(config))
		if err != nil {
			return nil, nil, err
		}
		m.Config.Digest, m.Config.Size = h, int64(len(config))
		if m.Config.Data != nil {
			m.Config.Data = config
		}
	}
	m.Layers = append(m.Layers, layer)
	if manifest, err = json.Marshal(m); err != nil {
		return nil, nil, fmt.Errorf("encoding signature manifest: %w", err)
	}
	return manifest, config, nil
}
