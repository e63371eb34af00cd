package sign

import (
	"bytes"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
)

// A signature manifest shaped as cosign v2.6.5 writes it (one signature).
const cosignManifest = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":233,"digest":"sha256:4a2ea4d4e0e7cb1e0a1b1f1cd8a4b9c07b8e4dfb3eaa0f64f6d1d3f0e1e8c4a1"},"layers":[{"mediaType":"application/vnd.dev.cosign.simplesigning.v1+json","size":248,"digest":"sha256:0dd697d5e50f1724cfad5184d680920f782c93708a7d25c3657a2e85428a3bbc","annotations":{"dev.cosignproject.cosign/signature":"MEUCIQDx"}}]}`

func FuzzParseSignatureManifest(f *testing.F) {
	for _, s := range []string{
		cosignManifest,
		`{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"digest":"sha512:00"},"layers":[{"digest":"md5:x","size":-1}]}`,
		`{"schemaVersion":1}`, `null`, `[]`, ``, `{"layers":null}`,
	} {
		f.Add([]byte(s), []byte(`{"rootfs":{"type":"layers"}}`))
	}
	layer := ggcr.Descriptor{MediaType: MediaTypeSimpleSigning, Size: 3, Digest: ggcr.Hash{Algorithm: "sha256", Hex: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}, Annotations: map[string]string{AnnotationSignature: "AA=="}}
	f.Fuzz(func(t *testing.T, b, config []byte) {
		sm, err := ParseSignatureManifest(b)
		if err != nil {
			return
		}
		for _, l := range sm.Signatures() {
			if l.Desc.Size < 0 || l.Desc.Size > maxPayloadSize || l.Desc.Digest.Validate() != nil {
				t.Fatalf("accepted layer %+v", l.Desc)
			}
		}
		if err := sm.Config().Digest.Validate(); err != nil {
			t.Fatalf("accepted config %+v: %v", sm.Config(), err)
		}
		m, cfg, err := appendSignature(sm, config, layer)
		if err != nil {
			return
		}
		sm2, err := ParseSignatureManifest(m)
		if err != nil {
			t.Fatalf("appendSignature wrote a manifest ParseSignatureManifest refuses: %v\n%s", err, m)
		}
		if n, n2 := len(sm.m.Layers), len(sm2.m.Layers); n2 != n+1 {
			t.Fatalf("%d layers after appending to %d", n2, n)
		}
		if cfg != nil && sm2.Config().Digest.String() != ggcrDigest(cfg) {
			t.Fatalf("config digest %s does not match the config bytes", sm2.Config().Digest)
		}
		if cfg == nil && !bytes.Equal([]byte(sm2.Config().Digest), []byte(sm.Config().Digest)) {
			t.Fatal("kept config changed digest")
		}
	})
}

func FuzzParseFallbackIndex(f *testing.F) {
	for _, s := range []string{
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":10,"digest":"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","artifactType":"application/vnd.dev.cosign.artifact.sig.v1+json"}]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"digest":"md5:x"}]}`,
		cosignManifest, `{"schemaVersion":1}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	add := ggcr.Descriptor{MediaType: "application/vnd.oci.image.manifest.v1+json", Size: 3, Digest: ggcr.Hash{Algorithm: "sha256", Hex: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}, ArtifactType: ArtifactTypeSignature}
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := parseFallbackIndex(b)
		if err != nil {
			return
		}
		for _, m := range idx.Manifests {
			if m.Digest.Algorithm != "sha256" {
				t.Fatalf("accepted %+v", m)
			}
		}
		out, err := fallbackIndex(idx, add)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseFallbackIndex(out)
		if err != nil {
			t.Fatalf("fallbackIndex wrote an index parseFallbackIndex refuses: %v\n%s", err, out)
		}
		if len(again.Manifests) != len(idx.Manifests)+1 {
			t.Fatalf("%d entries after appending to %d", len(again.Manifests), len(idx.Manifests))
		}
	})
}
