package oci

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// goldenManifest pins the manifest digest of fixedArtifact.
const goldenManifest = "sha256:521b2bf68918f4ccbfa6a205f7d7a036628c5728c4924b8a60621dddfff384b7"

const lockJSON = `{"packages":[{"name":"et-xmlfile","version":"1.1.0"}],"target":{"python":"3.11"}}`

func fixedArtifact() Artifact {
	return Artifact{
		ArtifactType: ArtifactTypeLayer,
		Config:       []byte(lockJSON),
		Layers: []LayerBlob{{
			Desc: v1.Descriptor{
				MediaType: MediaTypeLayer,
				Digest:    digest.FromString("layer one"),
				Size:      1234,
			},
			Title:       BlobTitle("et_xmlfile-1.1.0-py3-none-any.whl"),
			Wheel:       "et_xmlfile-1.1.0-py3-none-any.whl",
			WheelSHA256: strings.Repeat("ab", 32),
		}, {
			Desc: v1.Descriptor{
				MediaType: MediaTypeLayer,
				Digest:    digest.FromString("layer two"),
				Size:      99,
			},
			Title:       BlobTitle("openpyxl-3.1.2-py2.py3-none-any.whl"),
			Wheel:       "openpyxl-3.1.2-py2.py3-none-any.whl",
			WheelSHA256: strings.Repeat("01", 32),
		}},
		Annotations: map[string]string{
			AnnotationKind:     "base",
			AnnotationKey:      strings.Repeat("c", 64),
			AnnotationPython:   "3.11",
			AnnotationPlatform: "manylinux_2_28_x86_64",
		},
	}
}

func TestManifestGolden(t *testing.T) {
	a := fixedArtifact()
	b, desc, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != digest.FromBytes(b) || desc.Size != int64(len(b)) || desc.MediaType != v1.MediaTypeImageManifest || desc.ArtifactType != ArtifactTypeLayer {
		t.Errorf("descriptor %+v does not describe the manifest bytes", desc)
	}
	if string(desc.Digest) != goldenManifest {
		t.Errorf("manifest digest:\n got  %s\n want %s\nmanifest: %s", desc.Digest, goldenManifest, b)
	}
	// Same input, same bytes; map iteration order must not leak in.
	for range 20 {
		b2, _, err := fixedArtifact().Manifest()
		if err != nil || string(b2) != string(b) {
			t.Fatalf("second Manifest differs: %v\n%s\n%s", err, b, b2)
		}
	}

	m, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"schemaVersion", m.SchemaVersion, 2},
		{"mediaType", m.MediaType, v1.MediaTypeImageManifest},
		{"artifactType", m.ArtifactType, ArtifactTypeLayer},
		{"config.mediaType", m.Config.MediaType, MediaTypeLock},
		{"config.digest", m.Config.Digest, digest.FromString(lockJSON)},
		{"config.size", m.Config.Size, int64(len(lockJSON))},
		{"created", m.Annotations[v1.AnnotationCreated], CreatedEpoch},
		{"kind", m.Annotations[AnnotationKind], "base"},
		{"platform", m.Annotations[AnnotationPlatform], "manylinux_2_28_x86_64"},
		{"annotations", len(m.Annotations), 5},
		{"layers", len(m.Layers), 2},
		{"layer 0 title", m.Layers[0].Annotations[v1.AnnotationTitle], "et_xmlfile-1.1.0-py3-none-any.tar.gz"},
		{"layer 0 wheel", m.Layers[0].Annotations[AnnotationWheelFilename], "et_xmlfile-1.1.0-py3-none-any.whl"},
		{"layer 0 LayerWheel", LayerWheel(m.Layers[0]), "et_xmlfile-1.1.0-py3-none-any.whl"},
		{"layer 0 sha256", m.Layers[0].Annotations[AnnotationWheelSHA256], strings.Repeat("ab", 32)},
		{"layer 0 annotations", len(m.Layers[0].Annotations), 3},
		{"layer 1 digest", m.Layers[1].Digest, digest.FromString("layer two")},
		{"layer 1 size", m.Layers[1].Size, int64(99)},
		{"layer 1 mediaType", m.Layers[1].MediaType, MediaTypeLayer},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	// Manifest must not have modified the caller's maps.
	if _, ok := a.Annotations[v1.AnnotationCreated]; ok {
		t.Error("Manifest added created to the caller's annotation map")
	}
}

func TestManifestInvalid(t *testing.T) {
	tests := []struct {
		name   string
		modify func(a *Artifact)
		want   string
	}{
		{"artifact type", func(a *Artifact) { a.ArtifactType = "application/octet-stream" }, "artifact type"},
		{"empty config", func(a *Artifact) { a.Config = nil }, "config"},
		{"config not JSON", func(a *Artifact) { a.Config = []byte("{") }, "config"},
		{"no kind", func(a *Artifact) { delete(a.Annotations, AnnotationKind) }, AnnotationKind},
		{"no key", func(a *Artifact) { a.Annotations[AnnotationKey] = "" }, AnnotationKey},
		{"created set", func(a *Artifact) { a.Annotations[v1.AnnotationCreated] = "2024-01-01T00:00:00Z" }, "created"},
		{"no layers", func(a *Artifact) { a.Layers = nil }, "no layers"},
		{"bad digest", func(a *Artifact) { a.Layers[0].Desc.Digest = "sha256:../../etc/passwd" }, "invalid digest"},
		{"sha512 digest", func(a *Artifact) { a.Layers[0].Desc.Digest = digest.Digest("sha512:" + strings.Repeat("a", 128)) }, "sha512"},
		{"negative size", func(a *Artifact) { a.Layers[1].Desc.Size = -1 }, "negative size"},
		{"media type", func(a *Artifact) { a.Layers[0].Desc.MediaType = "" }, "media type"},
		{"title path", func(a *Artifact) { a.Layers[0].Title = "../x.whl" }, "title"},
		{"title empty", func(a *Artifact) { a.Layers[0].Title = "" }, "title"},
		{"title dotdot", func(a *Artifact) { a.Layers[0].Title = ".." }, "title"},
		{"title a wheel's", func(a *Artifact) { a.Layers[0].Title = a.Layers[0].Wheel }, "BlobTitle"},
		{"wheel not a wheel", func(a *Artifact) { a.Layers[0].Wheel = "x.tar.gz" }, "not a wheel filename"},
		{"wheel sha short", func(a *Artifact) { a.Layers[0].WheelSHA256 = "abc" }, "wheel sha256"},
		{"wheel sha upper", func(a *Artifact) { a.Layers[0].WheelSHA256 = strings.Repeat("AB", 32) }, "wheel sha256"},
		{"wheel sha not hex", func(a *Artifact) { a.Layers[0].WheelSHA256 = strings.Repeat("zz", 32) }, "wheel sha256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := fixedArtifact()
			tt.modify(&a)
			_, _, err := a.Manifest()
			if !errors.Is(err, ErrInvalidArtifact) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Manifest() = %v, want ErrInvalidArtifact mentioning %q", err, tt.want)
			}
		})
	}
	// Created is written in UTC to the second; one before 1970 is refused.
	a0 := fixedArtifact()
	a0.Created = time.Date(2026, 12, 1, 15, 4, 5, 999, time.FixedZone("CET", 3600))
	if b, _, err := a0.Manifest(); err != nil || !strings.Contains(string(b), `"org.opencontainers.image.created":"2026-12-01T14:04:05Z"`) {
		t.Errorf("Created 2026-12-01 15:04:05 CET: %v\n%s", err, b)
	}
	a0.Created = time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	if _, _, err := a0.Manifest(); !errors.Is(err, ErrInvalidArtifact) {
		t.Errorf("Created 1969: %v, want ErrInvalidArtifact", err)
	}
	// The created annotation may be given if it has the value Created gives.
	a := fixedArtifact()
	a.Annotations[v1.AnnotationCreated] = CreatedEpoch
	if _, d, err := a.Manifest(); err != nil || string(d.Digest) != goldenManifest {
		t.Errorf("explicit created = epoch: %v, %s", err, d.Digest)
	}
}

func TestParseManifest(t *testing.T) {
	good, _, err := fixedArtifact().Manifest()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"good", string(good), true},
		{"no mediaType", edit(func(m map[string]any) { delete(m, "mediaType") }), true},
		{"extension field", edit(func(m map[string]any) { m["x-extra"] = 1 }), true},
		{"trailing data", string(good) + "{}", false},
		{"trailing brace", string(good) + "}", false},
		{"not JSON", "nope", false},
		{"empty", "", false},
		{"array", "[]", false},
		{"schema 1", edit(func(m map[string]any) { m["schemaVersion"] = 1 }), false},
		{"index media type", edit(func(m map[string]any) { m["mediaType"] = v1.MediaTypeImageIndex }), false},
		{"config digest traversal", edit(func(m map[string]any) {
			m["config"].(map[string]any)["digest"] = "sha256:../../../../etc/shadow"
		}), false},
		{"config digest missing", edit(func(m map[string]any) { delete(m["config"].(map[string]any), "digest") }), false},
		{"layer digest upper", edit(func(m map[string]any) {
			m["layers"].([]any)[0].(map[string]any)["digest"] = "sha256:" + strings.Repeat("AB", 32)
		}), false},
		{"layer negative size", edit(func(m map[string]any) {
			m["layers"].([]any)[1].(map[string]any)["size"] = -5
		}), false},
		{"too big", `{"schemaVersion":2,"x":"` + strings.Repeat("a", maxManifestSize) + `"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tt.in))
			if tt.ok != (err == nil) {
				t.Fatalf("ParseManifest: err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidManifest) {
				t.Errorf("error %v does not wrap ErrInvalidManifest", err)
			}
		})
	}
}

func TestValidTag(t *testing.T) {
	tests := []struct {
		tag string
		ok  bool
	}{
		{"current", true},
		{"base-" + strings.Repeat("a", 64), true},
		{"cpython-3.11.7-" + strings.Repeat("0", 64), true},
		{"_x", true},
		{"A.b-C_d", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".hidden", false},
		{"-dash", false},
		{"a/b", false},
		{"a:b", false},
		{"a b", false},
		{"a\x00", false},
		{"tag\n", false},
		{"ü", false},
		{"..", false},
	}
	for _, tt := range tests {
		err := ValidTag(tt.tag)
		if tt.ok != (err == nil) {
			t.Errorf("ValidTag(%q) = %v, want ok=%v", tt.tag, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidTag) {
			t.Errorf("ValidTag(%q): %v does not wrap ErrInvalidTag", tt.tag, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
