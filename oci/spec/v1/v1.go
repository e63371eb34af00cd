// Package v1 holds the Go types of the OCI image specification v1.1 that this module reads
// and writes (descriptors, image manifests and indexes, the image layout's marker file)
// and the media types and annotation keys it names. The types marshal to the same JSON as
// github.com/opencontainers/image-spec v1.1.1's specs-go/v1, field for field and in the same
// order, which the tests hold them to: a manifest's bytes, and so its digest, are those
// image-spec would write.
//
// Why our own: image-spec's types import go-digest, whose package initialisation costs every
// start of every binary that links it (see oci/digest); these are declared over
// oci/digest.Digest instead. They are data only, and the specification fixes them.
package v1

import "github.com/pylayer/pylayer/oci/digest"

// Versioned is the schema version every manifest and index opens with.
type Versioned struct {
	SchemaVersion int `json:"schemaVersion"`
}

// Descriptor names a blob by its media type, digest and size.
type Descriptor struct {
	MediaType    string            `json:"mediaType"`
	Digest       digest.Digest     `json:"digest"`
	Size         int64             `json:"size"`
	URLs         []string          `json:"urls,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Data         []byte            `json:"data,omitempty"`
	Platform     *Platform         `json:"platform,omitempty"`
	ArtifactType string            `json:"artifactType,omitempty"`
}

// Platform is the platform an index entry's manifest runs on.
type Platform struct {
	Architecture string   `json:"architecture"`
	OS           string   `json:"os"`
	OSVersion    string   `json:"os.version,omitempty"`
	OSFeatures   []string `json:"os.features,omitempty"`
	Variant      string   `json:"variant,omitempty"`
}

// Manifest is an image manifest: a config blob and layers, optionally of an artifact type
// and about a subject.
type Manifest struct {
	Versioned
	MediaType    string            `json:"mediaType,omitempty"`
	ArtifactType string            `json:"artifactType,omitempty"`
	Config       Descriptor        `json:"config"`
	Layers       []Descriptor      `json:"layers"`
	Subject      *Descriptor       `json:"subject,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
}

// Index is an image index: a list of manifests.
type Index struct {
	Versioned
	MediaType    string            `json:"mediaType,omitempty"`
	ArtifactType string            `json:"artifactType,omitempty"`
	Manifests    []Descriptor      `json:"manifests"`
	Subject      *Descriptor       `json:"subject,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
}

// ImageLayout is the content of an image layout's ImageLayoutFile.
type ImageLayout struct {
	Version string `json:"imageLayoutVersion"`
}

// The image layout's marker file and its version.
const (
	ImageLayoutFile    = "oci-layout"
	ImageLayoutVersion = "1.0.0"
)

// Media types.
const (
	MediaTypeImageIndex     = "application/vnd.oci.image.index.v1+json"
	MediaTypeImageManifest  = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeImageLayer     = "application/vnd.oci.image.layer.v1.tar"
	MediaTypeImageLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	MediaTypeImageLayerZstd = "application/vnd.oci.image.layer.v1.tar+zstd"
)

// Annotation keys.
const (
	AnnotationCreated = "org.opencontainers.image.created"
	AnnotationRefName = "org.opencontainers.image.ref.name"
	AnnotationTitle   = "org.opencontainers.image.title"
)
