package sign

import (
	"context"
	"errors"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/pylayer/pylayer/internal/testenv"
	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// TestInteropReferrersStockCosign: signatures as OCI 1.1 referrers agree with the stock
// cosign CLI, against a registry without the referrers API (the fallback tag, as
// distribution 2.8) and one with it: `cosign verify --experimental-oci11` accepts the
// referrer Sign writes with the classic tag removed, Verify accepts what `cosign sign
// --registry-referrers-mode=oci-1-1` writes (no tag at all), byte for byte what
// referrerManifest and fallbackIndex would write, and both refuse a tampered referrer.
func TestInteropReferrersStockCosign(t *testing.T) {
	testenv.Integration(t, "the stock cosign CLI (make tools)")
	bin := cosignBinary(t)
	k := testKeys(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		api  bool
	}{{"fallback tag", false}, {"referrers API", true}} {
		t.Run(c.name, func(t *testing.T) {
			var s Store
			var rs *remoteStore
			if c.api {
				a := newAPIRegistry(t)
				s, rs = a, a.remoteStore
			} else {
				rs, _ = newRegistry(t)
				s = rs
			}
			ref := func(d v1.Descriptor) string { return s.Name() + "@" + d.Digest.String() }
			verify := func(pub string, d v1.Descriptor, oci11 bool) (string, error) {
				args := []string{"verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-insecure-registry", "--allow-http-registry"}
				if oci11 {
					args = append(args, "--experimental-oci11")
				}
				return runCosign(t, bin, append(args, ref(d))...)
			}

			t.Run("pylayer signs, cosign verifies the referrer", func(t *testing.T) {
				subject := pushSubject(t, s, "ours")
				mustSign(t, s, subject, k[0].signer)
				rs.deleteTag(t, SignatureTag(subject.Digest))
				if out, err := verify(k[0].pub, subject, false); err == nil {
					t.Fatalf("cosign verify in tag mode passed with the tag removed:\n%s", out)
				}
				out, err := verify(k[0].pub, subject, true)
				if err != nil {
					t.Fatalf("cosign verify --experimental-oci11 of our referrer: %v\n%s", err, out)
				}
				if !strings.Contains(out, subject.Digest.String()) {
					t.Fatalf("cosign verify printed no payload naming %s:\n%s", subject.Digest, out)
				}
				if out, err := verify(k[1].pub, subject, true); err == nil {
					t.Fatalf("cosign verify --experimental-oci11 with another key accepted our referrer:\n%s", out)
				}
			})

			t.Run("cosign signs a referrer, pylayer verifies", func(t *testing.T) {
				subject := pushSubject(t, s, "theirs")
				out, err := runCosignEnv(t, bin, []string{"COSIGN_EXPERIMENTAL=1"}, "sign", "--key", k[0].priv, "--tlog-upload=false", "--yes",
					"--registry-referrers-mode=oci-1-1", "--allow-insecure-registry", "--allow-http-registry", ref(subject))
				if err != nil {
					t.Fatalf("cosign sign --registry-referrers-mode=oci-1-1: %v\n%s", err, out)
				}
				if _, err := s.Resolve(ctx, SignatureTag(subject.Digest)); !errors.Is(err, oci.ErrNotFound) {
					t.Fatalf("cosign wrote the classic tag too (%v): the test would not read the referrer", err)
				}
				r, err := Verify(ctx, reader(s), subject, verifierFor(t, k[0].pub))
				if err != nil {
					t.Fatalf("Verify of cosign's referrer: %v", err)
				}
				if r.Source != SourceReferrer || r.Verified[0].DockerReference != s.Name() {
					t.Fatalf("result %+v, want a referrer claiming %s", r, s.Name())
				}
				if _, err := Verify(ctx, reader(s), subject, verifierFor(t, k[1].pub)); !errors.Is(err, ErrUntrusted) {
					t.Fatalf("Verify with another key: %v, want %v", err, ErrUntrusted)
				}

				// The bytes cosign wrote are the bytes Sign writes for the same signature.
				refs := mustReferrers(t, s, subject)
				if len(refs) != 1 {
					t.Fatalf("cosign left %d referrers, want 1", len(refs))
				}
				m, raw := readReferrer(t, s, refs[0])
				l := m.Layers[0]
				tagged, _, err := appendSignature(nil, nil, ggcr.Descriptor{MediaType: MediaTypeSimpleSigning, Size: l.Size, Digest: l.Digest, Annotations: l.Annotations})
				if err != nil {
					t.Fatal(err)
				}
				h, _ := ggcr.NewHash(subject.Digest.String())
				ours, err := referrerManifest(tagged, ggcr.Descriptor{MediaType: types.OCIManifestSchema1, Size: subject.Size, Digest: h})
				if err != nil {
					t.Fatal(err)
				}
				if string(ours) != string(raw) {
					t.Fatalf("cosign wrote the referrer\n%s\nSign would write\n%s", raw, ours)
				}
				if !c.api {
					d, err := s.Resolve(ctx, FallbackTag(subject.Digest))
					if err != nil {
						t.Fatal(err)
					}
					theirs, err := s.Manifest(ctx, d)
					if err != nil {
						t.Fatal(err)
					}
					rh, _ := ggcr.NewHash(refs[0].Digest.String())
					ourIdx, err := fallbackIndex(nil, ggcr.Descriptor{MediaType: types.OCIManifestSchema1, Size: refs[0].Size, Digest: rh, ArtifactType: ArtifactTypeSignature})
					if err != nil {
						t.Fatal(err)
					}
					if string(ourIdx) != string(theirs) {
						t.Fatalf("cosign wrote the fallback index\n%s\nSign would write\n%s", theirs, ourIdx)
					}
				}

				// Signing on top of cosign's referrer: the classic tag and one more
				// referrer; both keys verify, in pylayer and (the tag) in cosign.
				mustSign(t, s, subject, k[1].signer)
				if n := len(mustReferrers(t, s, subject)); n != 2 {
					t.Fatalf("%d referrers after Sign, want 2", n)
				}
				for _, key := range []keyPair{k[0], k[1]} {
					if _, err := Verify(ctx, reader(s), subject, verifierFor(t, key.pub)); err != nil {
						t.Fatalf("Verify with %s after Sign: %v", key.id, err)
					}
				}
				if out, err := verify(k[1].pub, subject, false); err != nil {
					t.Fatalf("cosign verify of our tag: %v\n%s", err, out)
				}
			})

			t.Run("tampered referrers fail in cosign too", func(t *testing.T) {
				subject := pushSubject(t, s, "tampered")
				mustSign(t, s, subject, k[0].signer)
				sm, raw, _ := readSig(t, s, subject)
				rs.deleteTag(t, SignatureTag(subject.Digest))
				dropReferrers(t, s, subject)
				pushReferrer(t, s, subject, tamperedSignature(t, raw, sm))
				if out, err := verify(k[0].pub, subject, true); err == nil {
					t.Fatalf("cosign verify --experimental-oci11 accepted a tampered referrer:\n%s", out)
				}
				if _, err := Verify(ctx, reader(s), subject, verifierFor(t, k[0].pub)); !errors.Is(err, ErrUntrusted) {
					t.Fatalf("Verify of a tampered referrer: %v, want %v", err, ErrUntrusted)
				}
			})
		})
	}
}
