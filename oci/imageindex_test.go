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

// goldenIndex pins the bytes of twoPlatformIndex: the index is part of what is signed.
const goldenIndex = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","artifactType":"application/vnd.pylayer.layer.v1","manifests":[` +
	`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%AMD%","size":%AMDSIZE%,"annotations":{"dev.pylayer.key":"%AMDKEY%","dev.pylayer.kind":"base","dev.pylayer.libc":"glibc","dev.pylayer.platform":"manylinux_2_28_x86_64","dev.pylayer.python":"3.11"},"platform":{"architecture":"amd64","os":"linux"},"artifactType":"application/vnd.pylayer.layer.v1"},` +
	`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%ARM%","size":%ARMSIZE%,"annotations":{"dev.pylayer.key":"%ARMKEY%","dev.pylayer.kind":"base","dev.pylayer.libc":"glibc","dev.pylayer.platform":"manylinux_2_28_aarch64","dev.pylayer.python":"3.11"},"platform":{"architecture":"arm64","os":"linux"},"artifactType":"application/vnd.pylayer.layer.v1"}],` +
	`"annotations":{"dev.pylayer.kind":"base","org.opencontainers.image.created":"2024-03-02T01:02:03Z"}}`

const goldenIndexDigest = "sha256:a18d0d923ff3bb9ac7d682124f76829f84fe0e89bd5f0f4518be475b9552640b"

// platformArtifact is fixedArtifact for the wheel platform tag, created at created.
func platformArtifact(tag string, created time.Time) Artifact {
	a := fixedArtifact()
	a.Annotations = map[string]string{}
	for k, v := range fixedArtifact().Annotations {
		a.Annotations[k] = v
	}
	a.Annotations[AnnotationPlatform] = tag
	a.Annotations[AnnotationKey] = strings.Repeat(tag[len(tag)-1:], 64)
	a.Created = created
	return a
}

func entryOf(t *testing.T, a Artifact) (IndexEntry, []byte) {
	t.Helper()
	raw, desc, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	e, err := EntryOf(raw)
	if err != nil {
		t.Fatal(err)
	}
	if e.Desc.Digest != desc.Digest || e.Desc.Size != desc.Size || e.Desc.ArtifactType != ArtifactTypeLayer {
		t.Fatalf("EntryOf descriptor %+v, the manifest's is %+v", e.Desc, desc)
	}
	return e, raw
}

func TestPlatformIndexGolden(t *testing.T) {
	amd, _ := entryOf(t, platformArtifact("manylinux_2_28_x86_64", time.Date(2024, 3, 2, 1, 2, 3, 0, time.UTC)))
	arm, _ := entryOf(t, platformArtifact("manylinux_2_28_aarch64", time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)))
	// Either order of entries gives the same bytes.
	b1, d1, err := PlatformIndex{Entries: []IndexEntry{arm, amd}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b2, d2, err := PlatformIndex{Entries: []IndexEntry{amd, arm}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(b1) != string(b2) || d1.Digest != d2.Digest {
		t.Fatalf("entry order changed the index:\n%s\n%s", b1, b2)
	}
	want := strings.NewReplacer(
		"%AMD%", amd.Desc.Digest.String(), "%AMDSIZE%", itoa(amd.Desc.Size), "%AMDKEY%", amd.Annotations[AnnotationKey],
		"%ARM%", arm.Desc.Digest.String(), "%ARMSIZE%", itoa(arm.Desc.Size), "%ARMKEY%", arm.Annotations[AnnotationKey],
	).Replace(goldenIndex)
	if string(b1) != want {
		t.Fatalf("index bytes\n%s\nwant\n%s", b1, want)
	}
	if d1.MediaType != v1.MediaTypeImageIndex || d1.ArtifactType != ArtifactTypeLayer || d1.Size != int64(len(b1)) {
		t.Errorf("descriptor %+v", d1)
	}
	if d1.Digest.String() != goldenIndexDigest {
		t.Errorf("index digest %s, golden %s: the index bytes changed", d1.Digest, goldenIndexDigest)
	}
	idx, err := ParseIndex(b1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		want Platform
		d    IndexEntry
	}{{Platform{"linux", "amd64", "", LibcGlibc}, amd}, {Platform{"linux", "arm64", "", LibcGlibc}, arm}} {
		got, err := SelectPlatform(idx, c.want)
		if err != nil || got.Digest != c.d.Desc.Digest {
			t.Errorf("SelectPlatform(%s) = %s, %v; want %s", c.want, got.Digest, err, c.d.Desc.Digest)
		}
	}
	_, err = SelectPlatform(idx, Platform{"linux", "amd64", "", LibcMusl})
	if !errors.Is(err, ErrNoPlatform) || !strings.Contains(err.Error(), "linux/amd64 (manylinux_2_28_x86_64), linux/arm64 (manylinux_2_28_aarch64)") {
		t.Errorf("SelectPlatform(musl) error %v: want ErrNoPlatform listing both platforms", err)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestPlatformIndexRefuses(t *testing.T) {
	amd, _ := entryOf(t, platformArtifact("manylinux_2_28_x86_64", time.Time{}))
	amd2, _ := entryOf(t, platformArtifact("manylinux_2_17_x86_64", time.Time{}))
	ext := amd2
	ext.Platform.Architecture = "arm64"
	ext.Annotations = map[string]string{AnnotationKind: "ext"}
	for name, c := range map[string]struct {
		entries []IndexEntry
		want    string
	}{
		"empty":          {nil, "no entries"},
		"same platform":  {[]IndexEntry{amd, amd2}, "differ by platform"},
		"mixed kinds":    {[]IndexEntry{amd, ext}, "one kind of artifact"},
		"not a manifest": {[]IndexEntry{{Desc: v1.Descriptor{MediaType: v1.MediaTypeImageIndex, Digest: amd.Desc.Digest, Size: 1}, Platform: amd.Platform}}, "not an image manifest"},
	} {
		_, _, err := PlatformIndex{Entries: c.entries}.Encode()
		if !errors.Is(err, ErrInvalidArtifact) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want ErrInvalidArtifact saying %q", name, err, c.want)
		}
	}
	b, _, err := PlatformIndex{Entries: []IndexEntry{amd}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"org.opencontainers.image.created":"`+CreatedEpoch+`"`) {
		t.Errorf("an index of entries without created has no epoch created: %s", b)
	}
}

func TestPlatformOf(t *testing.T) {
	for tag, want := range map[string]string{
		"manylinux_2_28_x86_64":  "linux/amd64",
		"manylinux_2_28_aarch64": "linux/arm64",
		"manylinux2014_i686":     "linux/386",
		"musllinux_1_2_x86_64":   "linux/amd64+musl",
		"musllinux_1_1_aarch64":  "linux/arm64+musl",
		"linux_armv7l":           "linux/arm/v7",
		"manylinux_2_17_ppc64le": "linux/ppc64le",
	} {
		p, err := PlatformOf(tag)
		if err != nil || p.String() != want {
			t.Errorf("PlatformOf(%s) = %s, %v; want %s", tag, p, err, want)
			continue
		}
		back, err := ParsePlatform(want)
		if err != nil || back != p {
			t.Errorf("ParsePlatform(%s) = %+v, %v; want %+v", want, back, err, p)
		}
	}
	for _, tag := range []string{"any", "macosx_11_0_arm64", "win_amd64", "manylinux_2_28_mips"} {
		if _, err := PlatformOf(tag); !errors.Is(err, ErrUnknownPlatform) {
			t.Errorf("PlatformOf(%s): %v, want ErrUnknownPlatform", tag, err)
		}
	}
	for _, s := range []string{"linux", "linux/", "windows/amd64", "linux/amd64+uclibc", "Linux/amd64", "linux/arm/v7/x"} {
		if _, err := ParsePlatform(s); !errors.Is(err, ErrUnknownPlatform) {
			t.Errorf("ParsePlatform(%q): %v, want ErrUnknownPlatform", s, err)
		}
	}
}

func TestSelectPlatformVariant(t *testing.T) {
	idx := &v1.Index{Manifests: []v1.Descriptor{
		{MediaType: v1.MediaTypeImageManifest, Digest: digest.Digest("sha256:" + strings.Repeat("a", 64)), Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}},
		{MediaType: v1.MediaTypeImageManifest, Digest: digest.Digest("sha256:" + strings.Repeat("b", 64)), Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}},
		{MediaType: v1.MediaTypeImageManifest, Digest: digest.Digest("sha256:" + strings.Repeat("c", 64))}, // no platform: never chosen
	}}
	if d, err := SelectPlatform(idx, Platform{"linux", "arm64", "", LibcGlibc}); err != nil || d.Digest != idx.Manifests[0].Digest {
		t.Errorf("arm64 without a variant: %s, %v", d.Digest, err)
	}
	if _, err := SelectPlatform(idx, Platform{"linux", "arm", "v6", LibcGlibc}); !errors.Is(err, ErrNoPlatform) {
		t.Errorf("arm/v6: %v, want ErrNoPlatform", err)
	}
	if _, err := SelectPlatform(&v1.Index{}, HostPlatform()); !errors.Is(err, ErrNoPlatform) {
		t.Errorf("empty index: %v, want ErrNoPlatform", err)
	}
}

func TestParseIndex(t *testing.T) {
	for _, b := range []string{
		`{"schemaVersion":1}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`,
		`{"schemaVersion":2,"manifests":[{"digest":"sha256:x","size":1}]}`,
		`{"schemaVersion":2} trailing`,
	} {
		if _, err := ParseIndex([]byte(b)); !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("ParseIndex(%s): %v, want ErrInvalidManifest", b, err)
		}
	}
}
