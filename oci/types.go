package oci

import (
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Artifact and media types of pylayer artifacts.
const (
	// ArtifactTypeLayer is the artifactType of a package layer (base, ext, iso).
	ArtifactTypeLayer = "application/vnd.pylayer.layer.v1"
	// ArtifactTypePython is the artifactType of an interpreter prefix.
	ArtifactTypePython = "application/vnd.pylayer.python.v1"
	// MediaTypeLock is the media type of the config blob: the lock bytes.
	MediaTypeLock = "application/vnd.pylayer.lock.v1+json"
	// MediaTypePythonConfig is the media type of an interpreter artifact's
	// config blob: the JSON of oci/interp.Config.
	MediaTypePythonConfig = "application/vnd.pylayer.python.config.v1+json"
	// MediaTypeLayer is the media type of a layer blob. It is the standard
	// gzip'd OCI layer so that crane, skopeo and oras can read it.
	MediaTypeLayer = v1.MediaTypeImageLayerGzip
)

// ConfigMediaType is the media type of the config blob of an artifact of type
// artifactType: MediaTypePythonConfig for ArtifactTypePython, MediaTypeLock
// otherwise.
func ConfigMediaType(artifactType string) string {
	if artifactType == ArtifactTypePython {
		return MediaTypePythonConfig
	}
	return MediaTypeLock
}

// Annotation keys of pylayer manifests and layer descriptors.
const (
	AnnotationKind        = "dev.pylayer.kind"
	AnnotationKey         = "dev.pylayer.key"
	AnnotationPython      = "dev.pylayer.python"
	AnnotationPlatform    = "dev.pylayer.platform"
	AnnotationBase        = "dev.pylayer.base"
	AnnotationWheelSHA256 = "dev.pylayer.wheel.sha256"
	// AnnotationWheelFilename names the wheel a layer blob was installed from. The blob's
	// org.opencontainers.image.title is not the wheel's name (BlobTitle): the blob is a
	// tar of the installed files, and generic tools (oras pull) write it under its title.
	AnnotationWheelFilename = "dev.pylayer.wheel.filename"

	// CreatedEpoch is org.opencontainers.image.created of an artifact with no
	// creation time from its content (Artifact.Created zero): interpreters, unless
	// SOURCE_DATE_EPOCH gives one.
	CreatedEpoch = "1970-01-01T00:00:00Z"
)

// maxManifestSize bounds the manifest and index documents this package reads;
// it matches the 4 MiB limit registries apply to manifests.
const maxManifestSize = 4 << 20

var (
	// ErrNotFound: the tag or blob is not in the layout.
	ErrNotFound = errors.New("not found")
	// ErrDigestMismatch: content does not hash to the digest it was addressed by.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrSizeMismatch: content does not have the size its descriptor states. It
	// also matches ErrDigestMismatch (content of another size cannot have the
	// digest), so that one errors.Is(err, ErrDigestMismatch) catches every
	// content that does not match its descriptor.
	ErrSizeMismatch error = sizeMismatch{}
	// ErrInvalidDigest: a digest is malformed or not sha256.
	ErrInvalidDigest = errors.New("invalid digest")
	// ErrInvalidTag: a tag does not follow the OCI tag grammar.
	ErrInvalidTag = errors.New("invalid tag")
	// ErrInvalidArtifact: an Artifact cannot be turned into a manifest.
	ErrInvalidArtifact = errors.New("invalid artifact")
	// ErrInvalidManifest: manifest bytes are not a valid pylayer-readable OCI image manifest.
	ErrInvalidManifest = errors.New("invalid manifest")
	// ErrInvalidLayout: the directory is not a usable OCI image layout.
	ErrInvalidLayout = errors.New("invalid OCI image layout")
)

type sizeMismatch struct{}

func (sizeMismatch) Error() string        { return "size mismatch" }
func (sizeMismatch) Is(target error) bool { return target == ErrDigestMismatch }

// ValidTag reports whether tag follows the OCI tag grammar
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}. The error wraps ErrInvalidTag.
func ValidTag(tag string) error {
	if len(tag) == 0 {
		return fmt.Errorf("%w: empty tag", ErrInvalidTag)
	}
	if len(tag) > 128 {
		return fmt.Errorf("%w: %q is %d characters, the limit is 128", ErrInvalidTag, tag, len(tag))
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
		if i > 0 {
			ok = ok || c == '.' || c == '-'
		}
		if !ok {
			return fmt.Errorf("%w: %q: character %d must be one of [a-zA-Z0-9_%s]", ErrInvalidTag, tag, i, map[bool]string{true: ".-", false: ""}[i > 0])
		}
	}
	return nil
}

// checkDigest accepts only well-formed sha256 digests (lowercase hex of the
// right length), so that a digest is always safe to use as a file name.
func checkDigest(d digest.Digest) error {
	// Validate before Algorithm: Algorithm panics on a string without ':'.
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrInvalidDigest, string(d), err)
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%w: %q: only sha256 digests are supported", ErrInvalidDigest, string(d))
	}
	return nil
}

// checkDescriptor validates the digest and size of a descriptor.
func checkDescriptor(d v1.Descriptor) error {
	if err := checkDigest(d.Digest); err != nil {
		return err
	}
	if d.Size < 0 {
		return fmt.Errorf("%w: descriptor %s has negative size %d", ErrSizeMismatch, d.Digest, d.Size)
	}
	return nil
}
