package sign

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// referrerStores runs f against an in-process registry without the referrers API, one
// with it, and an OCI layout.
func referrerStores(t *testing.T, f func(t *testing.T, s Store)) {
	stores(t, f)
	t.Run("registry with referrers API", func(t *testing.T) {
		t.Parallel()
		f(t, newAPIRegistry(t))
	})
}

// reader is s without its pushes, but with its referrers API if it has one.
func reader(s Store) Reader {
	if l, ok := s.(ReferrersLister); ok {
		return struct {
			Reader
			ReferrersLister
		}{s, l}
	}
	return readOnly{s}
}

// untag removes tag from s.
func untag(t *testing.T, s Store, tag string) {
	t.Helper()
	switch s := s.(type) {
	case *remoteStore:
		s.deleteTag(t, tag)
	case apiStore:
		s.deleteTag(t, tag)
	case layoutStore:
		p := filepath.Join(s.l.Dir, "index.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var idx v1.Index
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatal(err)
		}
		kept := idx.Manifests[:0]
		for _, m := range idx.Manifests {
			if m.Annotations[v1.AnnotationRefName] != tag {
				kept = append(kept, m)
			}
		}
		if len(kept) == len(idx.Manifests) {
			t.Fatalf("no tag %s to remove", tag)
		}
		idx.Manifests = kept
		if b, err = json.Marshal(idx); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("untag: store %T", s)
	}
}

// dropReferrers makes s list no referrer of subject, as before pylayer wrote them.
func dropReferrers(t *testing.T, s Store, subject v1.Descriptor) {
	t.Helper()
	if a, ok := s.(apiStore); ok {
		for _, d := range mustReferrers(t, s, subject) {
			a.deleteTag(t, d.Digest.String())
		}
		return
	}
	empty := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`)
	if _, err := s.PushManifest(context.Background(), empty, v1.MediaTypeImageIndex, FallbackTag(subject.Digest)); err != nil {
		t.Fatal(err)
	}
}

// mustReferrers lists the referrers of subject, as Verify does.
func mustReferrers(t *testing.T, s Store, subject v1.Descriptor) []v1.Descriptor {
	t.Helper()
	l, err := listReferrers(context.Background(), s, subject.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(apiStore); ok != l.api {
		t.Fatalf("listed through the API: %v, for a %T", l.api, s)
	}
	return l.descs
}

// readReferrer reads and parses the referrer d.
func readReferrer(t *testing.T, s Store, d v1.Descriptor) (ggcr.Manifest, []byte) {
	t.Helper()
	raw, err := s.Manifest(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	var m ggcr.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m, raw
}

// pushReferrer stores the signature manifest raw of subject as a referrer, as Sign does.
func pushReferrer(t *testing.T, s Store, subject v1.Descriptor, raw []byte) v1.Descriptor {
	t.Helper()
	d, err := putReferrer(context.Background(), s, subject, raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSignWritesReferrer: Sign stores the tagged signature manifest as a referrer of the
// subject too, in cosign's bytes, listed by the API or the fallback tag; signing again
// with the same key writes nothing, with another key one more referrer holding both.
func TestSignWritesReferrer(t *testing.T) {
	k := testKeys(t)
	referrerStores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		subject := pushSubject(t, s, "subject")
		mustSign(t, s, subject, k[0].signer)
		_, tagRaw, _ := readSig(t, s, subject)
		refs := mustReferrers(t, s, subject)
		if len(refs) != 1 {
			t.Fatalf("%d referrers, want 1: %+v", len(refs), refs)
		}
		h, _ := ggcr.NewHash(subject.Digest.String())
		want, err := referrerManifest(tagRaw, ggcr.Descriptor{MediaType: types.OCIManifestSchema1, Size: subject.Size, Digest: h})
		if err != nil {
			t.Fatal(err)
		}
		m, raw := readReferrer(t, s, refs[0])
		if string(raw) != string(want) {
			t.Fatalf("referrer\n%s\nwant\n%s", raw, want)
		}
		if refs[0].ArtifactType != ArtifactTypeSignature || refs[0].Digest != digest.FromBytes(raw) || refs[0].MediaType != v1.MediaTypeImageManifest {
			t.Fatalf("listed as %+v", refs[0])
		}
		var tagged ggcr.Manifest
		if err := json.Unmarshal(tagRaw, &tagged); err != nil {
			t.Fatal(err)
		}
		if m.ArtifactType != ArtifactTypeSignature || m.Config.MediaType != ArtifactTypeSignature || m.Config.Digest != tagged.Config.Digest ||
			m.Subject == nil || m.Subject.Digest.String() != subject.Digest.String() || m.Subject.Size != subject.Size ||
			len(m.Layers) != 1 || m.Layers[0].Digest != tagged.Layers[0].Digest || m.Layers[0].Annotations[AnnotationSignature] != tagged.Layers[0].Annotations[AnnotationSignature] {
			t.Fatalf("referrer %s does not carry the tagged signature %s", raw, tagRaw)
		}
		_, fbErr := s.Resolve(ctx, FallbackTag(subject.Digest))
		if _, api := s.(apiStore); api != errors.Is(fbErr, oci.ErrNotFound) {
			t.Fatalf("fallback tag with the referrers API %v: %v", api, fbErr)
		}

		mustSign(t, s, subject, k[0].signer)
		if again := mustReferrers(t, s, subject); len(again) != 1 || again[0].Digest != refs[0].Digest {
			t.Fatalf("signing again listed %+v, want only %s", again, refs[0].Digest)
		}

		mustSign(t, s, subject, k[1].signer)
		both := mustReferrers(t, s, subject)
		if len(both) != 2 {
			t.Fatalf("%d referrers after a second key signed, want 2", len(both))
		}
		if _, api := s.(apiStore); !api && both[0].Digest > both[1].Digest {
			t.Fatalf("fallback index not sorted by digest: %s, %s", both[0].Digest, both[1].Digest)
		}
		for _, d := range both {
			if d.Digest == refs[0].Digest {
				continue
			}
			if m, _ := readReferrer(t, s, d); len(m.Layers) != 2 {
				t.Fatalf("the new referrer holds %d signatures, want the 2 of the tag", len(m.Layers))
			}
		}
	})
}

// TestVerifyReferrer: Verify accepts a signature found only among the referrers and
// says so; tampered and copied referrers fail as tampered and copied tags do.
func TestVerifyReferrer(t *testing.T) {
	k := testKeys(t)
	trusted := func(t *testing.T) *Verifier { return verifierFor(t, k[0].pub) }
	cases := []struct {
		name    string
		setup   func(t *testing.T, s Store, subject, other v1.Descriptor)
		wantErr error
		wantMsg string // in the error
		check   func(t *testing.T, s Store, subject v1.Descriptor, r *Result)
	}{{
		name: "tag first",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[0].signer)
		},
		check: func(t *testing.T, s Store, subject v1.Descriptor, r *Result) {
			_, _, d := readSig(t, s, subject)
			if r.Source != SourceTag || r.SignatureManifest.Digest != d.Digest || len(r.Verified) != 1 || r.Rejected != 0 {
				t.Fatalf("result %+v, want the tag %s", r, d.Digest)
			}
		},
	}, {
		name: "referrer only",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[0].signer)
			untag(t, s, SignatureTag(subject.Digest))
		},
		check: func(t *testing.T, s Store, subject v1.Descriptor, r *Result) {
			refs := mustReferrers(t, s, subject)
			if r.Source != SourceReferrer || r.SignatureManifest.Digest != refs[0].Digest || r.SignatureManifest.ArtifactType != ArtifactTypeSignature ||
				len(r.Verified) != 1 || r.Verified[0].KeyID != k[0].id || r.Verified[0].DockerReference != s.Name() {
				t.Fatalf("result %+v, want the referrer %s", r, refs[0].Digest)
			}
		},
	}, {
		name: "untrusted tag, trusted referrer",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[0].signer)
			untag(t, s, SignatureTag(subject.Digest))
			mustSign(t, s, subject, k[1].signer)
		},
		check: func(t *testing.T, _ Store, _ v1.Descriptor, r *Result) {
			if r.Source != SourceReferrer || len(r.Verified) != 1 || r.Verified[0].KeyID != k[0].id || r.Rejected != 1 {
				t.Fatalf("result %+v, want k0's referrer and k1's signature rejected once", r)
			}
		},
	}, {
		name: "untrusted, in the tag and its referrer: one signature",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[1].signer)
		},
		wantErr: ErrUntrusted,
		wantMsg: "none of its 1 signature(s) verifies",
	}, {
		name: "untrusted referrer, no tag",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[1].signer)
			untag(t, s, SignatureTag(subject.Digest))
		},
		wantErr: ErrUntrusted,
	}, {
		name:    "unsigned",
		setup:   func(*testing.T, Store, v1.Descriptor, v1.Descriptor) {},
		wantErr: ErrNoSignature,
		wantMsg: "(no tag sha256-",
	}, {
		name: "tampered referrer, no tag",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[0].signer)
			sm, raw, _ := readSig(t, s, subject)
			untag(t, s, SignatureTag(subject.Digest))
			dropReferrers(t, s, subject)
			pushReferrer(t, s, subject, tamperedSignature(t, raw, sm))
		},
		wantErr: ErrUntrusted,
	}, {
		name: "referrer copied from another digest",
		setup: func(t *testing.T, s Store, subject, other v1.Descriptor) {
			mustSign(t, s, other, k[0].signer)
			_, raw, _ := readSig(t, s, other)
			pushReferrer(t, s, subject, raw)
		},
		wantErr: ErrPayloadMismatch,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			referrerStores(t, func(t *testing.T, s Store) {
				subject := pushSubject(t, s, "subject")
				other := pushSubject(t, s, "other")
				c.setup(t, s, subject, other)
				r, err := Verify(context.Background(), reader(s), subject, trusted(t))
				if c.wantErr != nil {
					if !errors.Is(err, c.wantErr) || r != nil || !strings.Contains(err.Error(), c.wantMsg) {
						t.Fatalf("Verify: %v, %+v, want %v (%q)", err, r, c.wantErr, c.wantMsg)
					}
					return
				}
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				c.check(t, s, subject, r)
			})
		})
	}
}

// TestSignRepairsReferrer: an artifact signed before referrers were written (or whose
// referrer push failed) gets its referrer when signed again with the same key, and the
// tag is not touched.
func TestSignRepairsReferrer(t *testing.T) {
	k := testKeys(t)
	referrerStores(t, func(t *testing.T, s Store) {
		subject := pushSubject(t, s, "subject")
		first := mustSign(t, s, subject, k[0].signer)
		dropReferrers(t, s, subject)
		if refs := mustReferrers(t, s, subject); len(refs) != 0 {
			t.Fatalf("referrers %+v left", refs)
		}
		if again := mustSign(t, s, subject, k[0].signer); again.Digest != first.Digest {
			t.Fatalf("signing again changed the tag: %s -> %s", first.Digest, again.Digest)
		}
		if refs := mustReferrers(t, s, subject); len(refs) != 1 || refs[0].ArtifactType != ArtifactTypeSignature {
			t.Fatalf("referrers %+v after signing again, want one signature", refs)
		}
	})
}

// TestReferrerErrors: what is not a referrers index, or too many signature referrers,
// fails Sign and Verify with a message naming the tag, never as "not signed".
func TestReferrerErrors(t *testing.T) {
	k := testKeys(t)
	ctx := context.Background()
	stores(t, func(t *testing.T, s Store) {
		subject := pushSubject(t, s, "subject")
		other := pushSubject(t, s, "other")
		// Another artifact's manifest under the fallback tag.
		raw, err := s.Manifest(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PushManifest(ctx, raw, v1.MediaTypeImageManifest, FallbackTag(subject.Digest)); err != nil {
			t.Fatal(err)
		}
		_, err = Sign(ctx, s, subject, "", k[0].signer)
		if err == nil || !strings.Contains(err.Error(), "not a referrers index") || !strings.Contains(err.Error(), "stored under tag "+SignatureTag(subject.Digest)) {
			t.Fatalf("Sign over a fallback tag naming a manifest: %v", err)
		}
		untag(t, s, SignatureTag(subject.Digest))
		if _, err := Verify(ctx, s, subject, verifierFor(t, k[0].pub)); err == nil || errors.Is(err, ErrNoSignature) || !strings.Contains(err.Error(), FallbackTag(subject.Digest)) {
			t.Fatalf("Verify with a fallback tag naming a manifest: %v", err)
		}

		// More signature referrers than Verify reads.
		mustSign(t, s, other, k[0].signer)
		refs := mustReferrers(t, s, other)
		h, _ := ggcr.NewHash(refs[0].Digest.String())
		d := ggcr.Descriptor{MediaType: types.OCIManifestSchema1, Size: refs[0].Size, Digest: h, ArtifactType: ArtifactTypeSignature}
		idx := ggcr.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
		for range maxSignatureReferrers + 1 {
			idx.Manifests = append(idx.Manifests, d)
		}
		b, _ := json.Marshal(idx)
		if _, err := s.PushManifest(ctx, b, v1.MediaTypeImageIndex, FallbackTag(other.Digest)); err != nil {
			t.Fatal(err)
		}
		untag(t, s, SignatureTag(other.Digest))
		if _, err := Verify(ctx, s, other, verifierFor(t, k[0].pub)); err == nil || !strings.Contains(err.Error(), "signature referrers, the limit") {
			t.Fatalf("Verify of %d signature referrers: %v", maxSignatureReferrers+1, err)
		}
	})
}

// TestFallbackIndexFormat: the fallback index is go-containerregistry's: compact, sorted
// by digest, descriptors with the artifactType.
func TestFallbackIndexFormat(t *testing.T) {
	a := ggcr.Descriptor{MediaType: types.OCIManifestSchema1, Size: 10, Digest: ggcr.Hash{Algorithm: "sha256", Hex: strings.Repeat("b", 64)}, ArtifactType: ArtifactTypeSignature}
	b := a
	b.Digest.Hex = strings.Repeat("a", 64)
	one, err := fallbackIndex(nil, a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":10,"digest":"sha256:` + strings.Repeat("b", 64) + `","artifactType":"` + ArtifactTypeSignature + `"}]}`
	if string(one) != want {
		t.Fatalf("index\n%s\nwant\n%s", one, want)
	}
	base, err := parseFallbackIndex(one)
	if err != nil {
		t.Fatal(err)
	}
	two, err := fallbackIndex(base, b)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := parseFallbackIndex(two)
	if err != nil || len(idx.Manifests) != 2 || idx.Manifests[0].Digest != b.Digest || len(base.Manifests) != 1 {
		t.Fatalf("appended index %s (%v); base now %d entries", two, err, len(base.Manifests))
	}
}

// tamperedSignature is the signature manifest raw (sm parsed) with one bit of its first
// signature flipped: the same shape and payload, a signature that no longer verifies.
func tamperedSignature(t *testing.T, raw []byte, sm *SignatureManifest) []byte {
	t.Helper()
	var m ggcr.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(sm.Signatures()[0].Base64Signature)
	sig[len(sig)-3] ^= 1
	m.Layers[0].Annotations[AnnotationSignature] = base64.StdEncoding.EncodeToString(sig)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
