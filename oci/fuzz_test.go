package oci

import (
	"encoding/json"
	"testing"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// FuzzLayoutIndex: parsing index.json bytes never panics, and whatever parses
// re-encodes to an index that parses again with the same entries.
func FuzzLayoutIndex(f *testing.F) {
	empty, _ := marshalIndex(nil)
	seeds := []string{
		string(empty),
		`{"schemaVersion":2,"manifests":[]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:e1624123bf42a671dac363a47f9a03eee03c469b20495e1453d8ed1111c79262","size":743,"annotations":{"org.opencontainers.image.ref.name":"base-k1"},"artifactType":"application/vnd.pylayer.layer.v1"}]}`,
		`{"schemaVersion":2,"manifests":[{"digest":"sha256:../../etc/passwd","size":1}]}`,
		`{"schemaVersion":2,"manifests":[{"digest":"sha256","size":-1}]}`,
		`{"schemaVersion":2,"manifests":[{"digest":":","size":1}]}`,
		`{"schemaVersion":2,"manifests":null}`,
		`{"schemaVersion":1}`,
		`[]`, `null`, ``, `{`, `{"schemaVersion":2}{}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := parseIndex(b)
		if err != nil {
			return
		}
		out, err := marshalIndex(idx)
		if err != nil {
			t.Fatalf("parsed index does not re-encode: %v", err)
		}
		again, err := parseIndex(out)
		if err != nil {
			t.Fatalf("re-encoded index does not parse: %v\n%s", err, out)
		}
		if len(again.Manifests) != len(idx.Manifests) {
			t.Fatalf("round trip changed the entries: %d -> %d", len(idx.Manifests), len(again.Manifests))
		}
	})
}

// FuzzManifest: reading arbitrary manifest bytes never panics, and a manifest
// that parses has only descriptors that name safe blob paths.
func FuzzManifest(f *testing.F) {
	good, _, err := fixedArtifact().Manifest()
	if err != nil {
		f.Fatal(err)
	}
	seeds := []string{
		string(good),
		`{"schemaVersion":2,"config":{"digest":"sha256:a540bb0dda304d816732d040eee930ac4126c7271838899a40c440d76b125b69","size":81},"layers":[]}`,
		`{"schemaVersion":2,"config":{"digest":"sha256:../x","size":1}}`,
		`{"schemaVersion":2,"config":{"digest":"sha512:00","size":1}}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json"}`,
		`{"schemaVersion":2,"layers":[{"digest":"x","size":-1}]}`,
		`{"schemaVersion":2,"config":{"digest":"sha256:a540bb0dda304d816732d040eee930ac4126c7271838899a40c440d76b125b69","size":81},"subject":{"digest":"nope"},"annotations":{"a":1}}`,
		`null`, `[]`, `""`, ``, `{"schemaVersion":2}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	l := &Layout{Dir: "/layout"}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if l.BlobPath(d.Digest) == "" {
				t.Fatalf("accepted manifest has an unusable digest %q", d.Digest)
			}
		}
		if _, err := json.Marshal(m); err != nil {
			t.Fatalf("parsed manifest does not re-encode: %v", err)
		}
	})
}

// FuzzPlatformIndex: parsing image index bytes and choosing a platform from them never
// panics, and an entry chosen is one of the index's, for the platform asked for.
func FuzzPlatformIndex(f *testing.F) {
	for _, s := range []string{
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:e1624123bf42a671dac363a47f9a03eee03c469b20495e1453d8ed1111c79262","size":743,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"dev.pylayer.libc":"glibc"}}]}`,
		`{"schemaVersion":2,"manifests":[{"digest":"sha256:e1624123bf42a671dac363a47f9a03eee03c469b20495e1453d8ed1111c79262","size":1,"platform":{"architecture":"arm64","os":"linux","variant":"v8"}}]}`,
		`{"schemaVersion":2,"manifests":[{"digest":"sha256:../x","size":1,"platform":{}}]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`,
		`{"schemaVersion":2}`, `null`, ``,
	} {
		f.Add([]byte(s), "linux/amd64")
	}
	f.Fuzz(func(t *testing.T, b []byte, platform string) {
		idx, err := ParseIndex(b)
		if err != nil {
			return
		}
		want, err := ParsePlatform(platform)
		if err != nil {
			return
		}
		d, err := SelectPlatform(idx, want)
		if err != nil {
			return
		}
		p, ok := EntryPlatform(d)
		if !ok || p.OS != want.OS || p.Architecture != want.Architecture || p.Libc != want.Libc || checkDigest(d.Digest) != nil {
			t.Fatalf("SelectPlatform(%s) chose %+v (platform %+v)", want, d, p)
		}
	})
}
