package v1

import (
	"bytes"
	"encoding/json"
	"testing"

	ispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// sameJSON marshals ours, unmarshals that into image-spec's type theirs, marshals it again
// and wants the same bytes; and then the other way round.
func sameJSON[T, U any](t *testing.T, ours T) {
	t.Helper()
	b, err := json.Marshal(ours)
	if err != nil {
		t.Fatal(err)
	}
	var theirs U
	if err := json.Unmarshal(b, &theirs); err != nil {
		t.Fatal(err)
	}
	b2, err := json.Marshal(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("ours and image-spec's differ:\n ours:   %s\n theirs: %s", b, b2)
	}
	var back T
	if err := json.Unmarshal(b2, &back); err != nil {
		t.Fatal(err)
	}
	if b3, _ := json.Marshal(back); !bytes.Equal(b3, b) {
		t.Fatalf("round trip through image-spec changed the JSON:\n before: %s\n after:  %s", b, b3)
	}
}

func TestJSONAgreesWithImageSpec(t *testing.T) {
	d := Descriptor{
		MediaType: MediaTypeImageLayerGzip, Digest: "sha256:" + "ab0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd", Size: 42,
		URLs: []string{"https://example.invalid/x"}, Annotations: map[string]string{AnnotationTitle: "x.whl", "b": "2", "a": "1"},
		Data: []byte("{}"), Platform: &Platform{Architecture: "arm64", OS: "linux", OSVersion: "6", OSFeatures: []string{"f"}, Variant: "v8"},
		ArtifactType: "application/vnd.example",
	}
	sameJSON[Descriptor, ispec.Descriptor](t, Descriptor{})
	sameJSON[Descriptor, ispec.Descriptor](t, d)
	sameJSON[Manifest, ispec.Manifest](t, Manifest{})
	sameJSON[Manifest, ispec.Manifest](t, Manifest{Versioned: Versioned{SchemaVersion: 2}, MediaType: MediaTypeImageManifest,
		ArtifactType: "application/vnd.example", Config: d, Layers: []Descriptor{d, {}}, Subject: &d, Annotations: map[string]string{AnnotationCreated: "now"}})
	sameJSON[Index, ispec.Index](t, Index{})
	sameJSON[Index, ispec.Index](t, Index{Versioned: Versioned{SchemaVersion: 2}, MediaType: MediaTypeImageIndex,
		ArtifactType: "application/vnd.example", Manifests: []Descriptor{d}, Subject: &d, Annotations: map[string]string{AnnotationRefName: "t"}})
	sameJSON[ImageLayout, ispec.ImageLayout](t, ImageLayout{Version: ImageLayoutVersion})
	sameJSON[Platform, ispec.Platform](t, Platform{})

	for ours, theirs := range map[string]string{
		ImageLayoutFile: ispec.ImageLayoutFile, ImageLayoutVersion: ispec.ImageLayoutVersion,
		MediaTypeImageIndex: ispec.MediaTypeImageIndex, MediaTypeImageManifest: ispec.MediaTypeImageManifest,
		MediaTypeImageLayer: ispec.MediaTypeImageLayer, MediaTypeImageLayerGzip: ispec.MediaTypeImageLayerGzip,
		MediaTypeImageLayerZstd: ispec.MediaTypeImageLayerZstd, AnnotationCreated: ispec.AnnotationCreated,
		AnnotationRefName: ispec.AnnotationRefName, AnnotationTitle: ispec.AnnotationTitle,
	} {
		if ours != theirs {
			t.Errorf("constant %q, image-spec %q", ours, theirs)
		}
	}
}

// FuzzJSONAgreesWithImageSpec: any JSON a registry could send decodes into ours and
// image-spec's manifest alike (accepted or refused alike, and to the same bytes).
func FuzzJSONAgreesWithImageSpec(f *testing.F) {
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"a","digest":"sha256:00","size":1},"layers":[]}`))
	f.Add([]byte(`{"layers":[{"data":"e30=","platform":{"os":"linux"}}],"subject":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ours Manifest
		var theirs ispec.Manifest
		err, gerr := json.Unmarshal(b, &ours), json.Unmarshal(b, &theirs)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("%q: ours %v, image-spec %v", b, err, gerr)
		}
		if err != nil {
			return
		}
		ob, _ := json.Marshal(ours)
		tb, _ := json.Marshal(theirs)
		if !bytes.Equal(ob, tb) {
			t.Fatalf("%q decodes differently:\n ours:   %s\n theirs: %s", b, ob, tb)
		}
	})
}
