package oci

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// LayerBlob is one layer of an Artifact: a blob already written to a file
// (for example by TarTree), with the wheel it was installed from.
type LayerBlob struct {
	Path        string        // file holding the blob bytes; verified against Desc when stored
	Desc        v1.Descriptor // media type, digest and size of the blob
	Title       string        // the blob's file name, org.opencontainers.image.title: BlobTitle(Wheel) for a wheel's blob
	Wheel       string        // the wheel's filename: dev.pylayer.wheel.filename ("" for ArtifactTypePython)
	WheelSHA256 string        // lowercase hex sha256 of the wheel: dev.pylayer.wheel.sha256 (optional, and usually "", for ArtifactTypePython)
}

// BlobTitle is the title of the layer blob holding the installed files of the wheel
// named wheel: its name without ".whl", with the extension of what the blob is (a gzip
// tar), so that a generic tool writing it under its title (oras pull) writes
// "lxml-4.9.2-cp311-cp311-manylinux_2_28_x86_64.tar.gz", not a tar under a wheel's name.
func BlobTitle(wheel string) string { return strings.TrimSuffix(wheel, ".whl") + ".tar.gz" }

// LayerWheel returns the filename of the wheel a layer descriptor's blob was installed
// from: its dev.pylayer.wheel.filename annotation, or, in an artifact published before
// blobs had their own titles, its title when that is a wheel filename. "" when neither.
func LayerWheel(d v1.Descriptor) string {
	if w := d.Annotations[AnnotationWheelFilename]; w != "" {
		return w
	}
	if t := d.Annotations[v1.AnnotationTitle]; strings.HasSuffix(t, ".whl") {
		return t
	}
	return ""
}

// Artifact is a pylayer artifact before it is stored: a lock as the config
// blob and one layer blob per wheel; for ArtifactTypePython, the interpreter's
// config (MediaTypePythonConfig) and one blob of the whole prefix.
type Artifact struct {
	ArtifactType string            // ArtifactTypeLayer or ArtifactTypePython
	Config       []byte            // the lock bytes (config blob, ConfigMediaType(ArtifactType))
	Layers       []LayerBlob       // one per wheel, in lock order
	Annotations  map[string]string // kind, key, python, platform, base ...; created is added by Manifest
	// Created is org.opencontainers.image.created, in UTC to the second; the zero time is
	// CreatedEpoch. It is part of the manifest's bytes: it must come from content (the
	// newest wheel's BuiltAt) or from SOURCE_DATE_EPOCH, never from the clock.
	Created time.Time
}

// layerMediaTypes are the layer blob media types a pylayer manifest may carry, the ones
// LayerReader reads.
var layerMediaTypes = map[string]bool{
	v1.MediaTypeImageLayerGzip: true,
	v1.MediaTypeImageLayerZstd: true,
	v1.MediaTypeImageLayer:     true,
}

// IsLayerMediaType reports whether a layer blob of media type mt may be in a pylayer
// manifest: a tar, plain, gzip'd or zstd-compressed.
func IsLayerMediaType(mt string) bool { return layerMediaTypes[mt] }

// Manifest returns the OCI 1.1 image manifest of a, its bytes and its
// descriptor. The bytes depend only on a: the manifest has schemaVersion 2,
// mediaType and artifactType set, the config descriptor of the lock, one layer
// descriptor per LayerBlob annotated with its title and wheel sha256, and a's
// annotations plus org.opencontainers.image.created (Created, CreatedEpoch when zero). Errors
// wrap ErrInvalidArtifact.
func (a Artifact) Manifest() ([]byte, v1.Descriptor, error) {
	if err := a.check(); err != nil {
		return nil, v1.Descriptor{}, err
	}
	m := v1.Manifest{
		Versioned:    v1.Versioned{SchemaVersion: 2},
		MediaType:    v1.MediaTypeImageManifest,
		ArtifactType: a.ArtifactType,
		Config: v1.Descriptor{
			MediaType: ConfigMediaType(a.ArtifactType),
			Digest:    digest.FromBytes(a.Config),
			Size:      int64(len(a.Config)),
		},
		Layers:      make([]v1.Descriptor, 0, len(a.Layers)),
		Annotations: map[string]string{v1.AnnotationCreated: a.created()},
	}
	for k, v := range a.Annotations {
		m.Annotations[k] = v
	}
	for _, l := range a.Layers {
		ann := make(map[string]string, len(l.Desc.Annotations)+2)
		for k, v := range l.Desc.Annotations {
			ann[k] = v
		}
		ann[v1.AnnotationTitle] = l.Title
		if l.Wheel != "" {
			ann[AnnotationWheelFilename] = l.Wheel
		}
		if l.WheelSHA256 != "" {
			ann[AnnotationWheelSHA256] = l.WheelSHA256
		}
		m.Layers = append(m.Layers, v1.Descriptor{
			MediaType:   l.Desc.MediaType,
			Digest:      l.Desc.Digest,
			Size:        l.Desc.Size,
			Annotations: ann,
		})
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("encoding manifest: %w", err)
	}
	return b, v1.Descriptor{
		MediaType:    v1.MediaTypeImageManifest,
		ArtifactType: a.ArtifactType,
		Digest:       digest.FromBytes(b),
		Size:         int64(len(b)),
	}, nil
}

func (a Artifact) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidArtifact, fmt.Sprintf(format, args...))
	}
	if a.ArtifactType != ArtifactTypeLayer && a.ArtifactType != ArtifactTypePython {
		return bad("artifact type %q is not %q or %q", a.ArtifactType, ArtifactTypeLayer, ArtifactTypePython)
	}
	if len(a.Config) == 0 || !json.Valid(a.Config) {
		return bad("config (the lock) must be JSON, got %d bytes that are not", len(a.Config))
	}
	for _, k := range []string{AnnotationKind, AnnotationKey} {
		if a.Annotations[k] == "" {
			return bad("annotation %s is missing", k)
		}
	}
	if c, ok := a.Annotations[v1.AnnotationCreated]; ok && c != a.created() {
		return bad("annotation %s is %q; it is %q from Artifact.Created, leave it unset", v1.AnnotationCreated, c, a.created())
	}
	if !a.Created.IsZero() && (a.Created.Before(time.Unix(0, 0)) || a.Created.Year() > 9999) {
		return bad("created %s is outside 1970-9999", a.Created)
	}
	if len(a.Layers) == 0 {
		return bad("no layers: an artifact needs at least one layer blob")
	}
	for i, l := range a.Layers {
		if err := checkDescriptor(l.Desc); err != nil {
			return bad("layer %d (%s): %v", i, l.Title, err)
		}
		if !layerMediaTypes[l.Desc.MediaType] {
			return bad("layer %d (%s): media type %q is not an OCI layer media type", i, l.Title, l.Desc.MediaType)
		}
		if l.Title == "" || strings.ContainsAny(l.Title, "/\\\x00") || l.Title == "." || l.Title == ".." {
			return bad("layer %d: title %q must be a plain file name (BlobTitle of the wheel filename)", i, l.Title)
		}
		if l.Wheel != "" && (!strings.HasSuffix(l.Wheel, ".whl") || strings.ContainsAny(l.Wheel, "/\\\x00")) {
			return bad("layer %d (%s): wheel %q is not a wheel filename", i, l.Title, l.Wheel)
		}
		if strings.HasSuffix(l.Title, ".whl") {
			return bad("layer %d: title %q names a wheel, but the blob is a tar of its installed files: use BlobTitle", i, l.Title)
		}
		if l.WheelSHA256 == "" && a.ArtifactType == ArtifactTypePython {
			continue // an interpreter layer comes from no wheel
		}
		if digest.SHA256.Validate(l.WheelSHA256) != nil {
			return bad("layer %d (%s): wheel sha256 %q is not 64 lowercase hex digits", i, l.Title, l.WheelSHA256)
		}
	}
	return nil
}

// created is the value of org.opencontainers.image.created: RFC 3339 in UTC, to the second.
func (a Artifact) created() string {
	if a.Created.IsZero() {
		return CreatedEpoch
	}
	return a.Created.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// ParseManifest decodes and checks manifest bytes: an OCI image manifest
// (schemaVersion 2, mediaType the image manifest's if set) whose config and
// layer descriptors have valid sha256 digests and non-negative sizes. It does
// not check that the bytes hash to any digest; Layout.Manifest does. Errors
// wrap ErrInvalidManifest.
func ParseManifest(b []byte) (*v1.Manifest, error) {
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidManifest, len(b), maxManifestSize)
	}
	var m v1.Manifest
	// Unmarshal (unlike a Decoder) rejects trailing data after the document.
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalidManifest, err)
	}
	if m.SchemaVersion != 2 {
		return nil, fmt.Errorf("%w: schemaVersion is %d, want 2", ErrInvalidManifest, m.SchemaVersion)
	}
	if m.MediaType != "" && m.MediaType != v1.MediaTypeImageManifest {
		return nil, fmt.Errorf("%w: mediaType is %q, want %q", ErrInvalidManifest, m.MediaType, v1.MediaTypeImageManifest)
	}
	if err := checkDescriptor(m.Config); err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrInvalidManifest, err)
	}
	for i, l := range m.Layers {
		if err := checkDescriptor(l); err != nil {
			return nil, fmt.Errorf("%w: layer %d: %v", ErrInvalidManifest, i, err)
		}
	}
	return &m, nil
}
