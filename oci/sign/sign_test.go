package sign

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

const testPassword = "correct horse battery staple"

// keyPair is a cosign key pair written to files.
type keyPair struct {
	priv, pub string // file paths
	signer    Signer
	id        string
}

var (
	keysOnce sync.Once
	keysDir  string
	keys     [2]keyPair // keys[0] "trusted", keys[1] "other"
	keysErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if keysDir != "" {
		os.RemoveAll(keysDir)
	}
	os.Exit(code)
}

// testKeys returns two key pairs, generated once per test binary (scrypt is slow).
func testKeys(t *testing.T) [2]keyPair {
	t.Helper()
	keysOnce.Do(func() {
		if keysDir, keysErr = os.MkdirTemp("", "pylayer-sign-keys-"); keysErr != nil {
			return
		}
		for i := range keys {
			priv, pub, err := GenerateKeyPair([]byte(testPassword))
			if err != nil {
				keysErr = err
				return
			}
			k := keyPair{priv: filepath.Join(keysDir, string(rune('a'+i))+".key"), pub: filepath.Join(keysDir, string(rune('a'+i))+".pub")}
			if err := os.WriteFile(k.priv, priv, 0o600); err != nil {
				keysErr = err
				return
			}
			if err := os.WriteFile(k.pub, pub, 0o644); err != nil {
				keysErr = err
				return
			}
			if k.signer, keysErr = LoadSigner(context.Background(), k.priv, staticPassword(testPassword)); keysErr != nil {
				return
			}
			v, err := LoadVerifier(context.Background(), k.pub)
			if err != nil {
				keysErr = err
				return
			}
			k.id = v.KeyIDs()[0]
			keys[i] = k
		}
	})
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	return keys
}

func staticPassword(p string) func() ([]byte, error) {
	return func() ([]byte, error) { return []byte(p), nil }
}

func verifierFor(t *testing.T, paths ...string) *Verifier {
	t.Helper()
	v, err := LoadVerifier(context.Background(), paths...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// stores runs f against an in-process registry and an OCI layout.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("registry", func(t *testing.T) {
		t.Parallel()
		s, _ := newRegistry(t)
		f(t, s)
	})
	t.Run("layout", func(t *testing.T) {
		t.Parallel()
		f(t, newLayoutStore(t))
	})
}

// readSig returns the parsed signature manifest of subject.
func readSig(t *testing.T, s Store, subject v1.Descriptor) (*SignatureManifest, []byte, v1.Descriptor) {
	t.Helper()
	ctx := context.Background()
	d, err := s.Resolve(ctx, SignatureTag(subject.Digest))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.Manifest(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := ParseSignatureManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	return sm, raw, d
}

// editSig rewrites the signature manifest tagged for subject with edit and pushes it
// under the signature tag of target.
func editSig(t *testing.T, s Store, subject, target v1.Descriptor, edit func(m *ggcr.Manifest)) {
	t.Helper()
	_, raw, d := readSig(t, s, subject)
	var m ggcr.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushManifest(context.Background(), b, d.MediaType, SignatureTag(target.Digest)); err != nil {
		t.Fatal(err)
	}
}

func TestSignVerify(t *testing.T) {
	k := testKeys(t)
	trusted := func(t *testing.T) *Verifier { return verifierFor(t, k[0].pub) }
	cases := []struct {
		name    string
		setup   func(t *testing.T, s Store, subject, other v1.Descriptor)
		trust   func(t *testing.T) *Verifier
		wantErr error // nil: verifies
		check   func(t *testing.T, s Store, r *Result)
	}{{
		name:  "signed by trusted key",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) { mustSign(t, s, subject, k[0].signer) },
		trust: trusted,
		check: func(t *testing.T, s Store, r *Result) {
			if len(r.Verified) != 1 || r.Rejected != 0 || r.Verified[0].KeyID != k[0].id || r.Verified[0].KeySource != k[0].pub {
				t.Fatalf("result %+v", r)
			}
			if r.Verified[0].DockerReference != s.Name() {
				t.Fatalf("docker reference %q, want %q", r.Verified[0].DockerReference, s.Name())
			}
		},
	}, {
		name:    "unsigned",
		setup:   func(*testing.T, Store, v1.Descriptor, v1.Descriptor) {},
		trust:   trusted,
		wantErr: ErrNoSignature,
	}, {
		name:    "signed by an untrusted key",
		setup:   func(t *testing.T, s Store, subject, _ v1.Descriptor) { mustSign(t, s, subject, k[1].signer) },
		trust:   trusted,
		wantErr: ErrUntrusted,
	}, {
		name: "signature copied from another digest",
		setup: func(t *testing.T, s Store, subject, other v1.Descriptor) {
			mustSign(t, s, other, k[0].signer)
			editSig(t, s, other, subject, func(*ggcr.Manifest) {})
		},
		trust:   trusted,
		wantErr: ErrPayloadMismatch,
	}, {
		name: "tampered signature annotation",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[0].signer)
			dropReferrers(t, s, subject) // else the referrer's intact copy verifies
			editSig(t, s, subject, subject, func(m *ggcr.Manifest) {
				sig, _ := base64.StdEncoding.DecodeString(m.Layers[0].Annotations[AnnotationSignature])
				sig[len(sig)-3] ^= 1
				m.Layers[0].Annotations[AnnotationSignature] = base64.StdEncoding.EncodeToString(sig)
			})
		},
		trust:   trusted,
		wantErr: ErrUntrusted,
	}, {
		name: "signature layer swapped for another payload",
		setup: func(t *testing.T, s Store, subject, other v1.Descriptor) {
			mustSign(t, s, subject, k[0].signer)
			mustSign(t, s, other, k[1].signer)
			dropReferrers(t, s, subject)
			otherSig, _, _ := readSig(t, s, other)
			editSig(t, s, subject, subject, func(m *ggcr.Manifest) {
				// keep our signature, point it at the other payload
				l := otherSig.Signatures()[0].Desc
				m.Layers[0].Digest, _ = ggcr.NewHash(l.Digest.String())
				m.Layers[0].Size = l.Size
			})
		},
		trust:   trusted,
		wantErr: ErrUntrusted,
	}, {
		name: "two signatures, one untrusted",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustSign(t, s, subject, k[1].signer)
			mustSign(t, s, subject, k[0].signer)
			if sm, _, _ := readSig(t, s, subject); len(sm.Signatures()) != 2 {
				t.Fatalf("%d signatures, want 2", len(sm.Signatures()))
			}
		},
		trust: trusted,
		check: func(t *testing.T, _ Store, r *Result) {
			if len(r.Verified) != 1 || r.Rejected != 1 || r.Verified[0].KeyID != k[0].id {
				t.Fatalf("result %+v", r)
			}
		},
	}, {
		name:  "key file with two keys",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) { mustSign(t, s, subject, k[0].signer) },
		trust: func(t *testing.T) *Verifier {
			a, _ := os.ReadFile(k[1].pub)
			b, _ := os.ReadFile(k[0].pub)
			p := filepath.Join(t.TempDir(), "trusted.pub")
			if err := os.WriteFile(p, append(a, b...), 0o644); err != nil {
				t.Fatal(err)
			}
			v := verifierFor(t, p)
			if len(v.KeyIDs()) != 2 {
				t.Fatalf("%d keys, want 2", len(v.KeyIDs()))
			}
			return v
		},
		check: func(t *testing.T, _ Store, r *Result) {
			if r.Verified[0].KeyID != k[0].id {
				t.Fatalf("verified by %s, want %s", r.Verified[0].KeyID, k[0].id)
			}
		},
	}, {
		name: "signing again is idempotent",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			a := mustSign(t, s, subject, k[0].signer)
			b := mustSign(t, s, subject, k[0].signer)
			if a.Digest != b.Digest {
				t.Fatalf("second signature changed the manifest: %s -> %s", a.Digest, b.Digest)
			}
		},
		trust: trusted,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stores(t, func(t *testing.T, s Store) {
				subject := pushSubject(t, s, "subject")
				other := pushSubject(t, s, "other")
				c.setup(t, s, subject, other)
				r, err := Verify(context.Background(), readOnly{s}, subject, c.trust(t))
				if c.wantErr != nil {
					if !errors.Is(err, c.wantErr) {
						t.Fatalf("Verify: got %v, want %v", err, c.wantErr)
					}
					if r != nil {
						t.Fatal("a failed Verify returned a result")
					}
					return
				}
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if r.Subject != subject.Digest || r.SignatureManifest.Digest == "" {
					t.Fatalf("result %+v", r)
				}
				if c.check != nil {
					c.check(t, s, r)
				}
			})
		})
	}
}

func mustSign(t *testing.T, s Store, subject v1.Descriptor, signer Signer) v1.Descriptor {
	t.Helper()
	d, err := Sign(context.Background(), s, subject, "", signer)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return d
}

// lyingStore returns altered bytes for one blob, as a hostile registry or a corrupted
// cache would; Verify must check digests itself.
type lyingStore struct {
	Store
	victim string
}

func (l lyingStore) Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	if string(d.Digest) != l.victim {
		return l.Store.Blob(ctx, d)
	}
	rc, err := l.Store.Blob(ctx, d)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	b = bytes.Replace(b, []byte("sha256:"), []byte("sha256;"), 1)
	return io.NopCloser(bytes.NewReader(b)), nil
}

func TestVerifyTamperedBlob(t *testing.T) {
	k := testKeys(t)
	stores(t, func(t *testing.T, s Store) {
		subject := pushSubject(t, s, "subject")
		mustSign(t, s, subject, k[0].signer)
		sm, _, _ := readSig(t, s, subject)
		liar := lyingStore{Store: s, victim: string(sm.Signatures()[0].Desc.Digest)}
		_, err := Verify(context.Background(), liar, subject, verifierFor(t, k[0].pub))
		if !errors.Is(err, oci.ErrDigestMismatch) {
			t.Fatalf("Verify through a store returning altered payload bytes: %v, want %v", err, oci.ErrDigestMismatch)
		}
	})
	t.Run("layout file modified on disk", func(t *testing.T) {
		s := newLayoutStore(t)
		subject := pushSubject(t, s, "subject")
		mustSign(t, s, subject, k[0].signer)
		sm, _, _ := readSig(t, s, subject)
		p := s.l.BlobPath(sm.Signatures()[0].Desc.Digest)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Replace(b, []byte("sha256:"), []byte("sha256;"), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(context.Background(), s, subject, verifierFor(t, k[0].pub)); !errors.Is(err, oci.ErrDigestMismatch) {
			t.Fatalf("Verify of a modified payload blob: %v, want %v", err, oci.ErrDigestMismatch)
		}
	})
}

func TestSignManifestFormat(t *testing.T) {
	k := testKeys(t)
	s := newLayoutStore(t)
	subject := pushSubject(t, s, "subject")
	mustSign(t, s, subject, k[0].signer)
	mustSign(t, s, subject, k[1].signer)
	sm, raw, d := readSig(t, s, subject)
	if d.MediaType != v1.MediaTypeImageManifest || sm.MediaType() != v1.MediaTypeImageManifest {
		t.Fatalf("media type %q / %q", d.MediaType, sm.MediaType())
	}
	want, err := Payload(subject.Digest, s.Name())
	if err != nil {
		t.Fatal(err)
	}
	wantPrefix := `{"critical":{"identity":{"docker-reference":"` + s.Name() + `"},"image":{"docker-manifest-digest":"` + subject.Digest.String() + `"},"type":"cosign container image signature"},"optional":null}`
	if string(want) != wantPrefix {
		t.Fatalf("payload\n%s\nwant\n%s", want, wantPrefix)
	}
	for i, l := range sm.Signatures() {
		b, err := readBlob(context.Background(), s, l.Desc, maxPayloadSize)
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("layer %d payload %q, %v", i, b, err)
		}
		if len(l.Desc.Annotations) != 1 || l.Base64Signature == "" {
			t.Fatalf("layer %d annotations %v", i, l.Desc.Annotations)
		}
	}
	cfg, err := readBlob(context.Background(), s, sm.Config(), maxManifestSize)
	if err != nil {
		t.Fatal(err)
	}
	pd := sm.Signatures()[0].Desc.Digest
	wantCfg := `{"architecture":"","created":"0001-01-01T00:00:00Z","history":[{"created":"0001-01-01T00:00:00Z"},{"created":"0001-01-01T00:00:00Z"}],"os":"","rootfs":{"type":"layers","diff_ids":["` + pd.String() + `","` + pd.String() + `"]},"config":{}}`
	if string(cfg) != wantCfg {
		t.Fatalf("config\n%s\nwant\n%s", cfg, wantCfg)
	}
	if sm.Config().MediaType != "application/vnd.oci.image.config.v1+json" || strings.Contains(string(raw), "subject") {
		t.Fatalf("manifest %s", raw)
	}
}

func TestSignRejects(t *testing.T) {
	k := testKeys(t)
	s := newLayoutStore(t)
	subject := pushSubject(t, s, "subject")
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		subject v1.Descriptor
		ref     string
		signer  Signer
	}{
		{"sha512 subject", v1.Descriptor{Digest: digest.Digest("sha512:" + strings.Repeat("0", 128))}, "", k[0].signer},
		{"malformed subject", v1.Descriptor{Digest: "sha256:xyz"}, "", k[0].signer},
		{"empty subject", v1.Descriptor{}, "", k[0].signer},
		{"reference with a newline", subject, "a\nb", k[0].signer},
		{"no signer", subject, "", nil},
	} {
		if _, err := Sign(ctx, s, c.subject, c.ref, c.signer); err == nil {
			t.Errorf("%s: Sign succeeded", c.name)
		}
	}
	if _, err := Verify(ctx, s, subject, nil); err == nil {
		t.Error("Verify with no keys succeeded")
	}
	// A tag that names something that is not a signature manifest is never overwritten.
	if _, err := s.PushManifest(ctx, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`), v1.MediaTypeImageIndex, SignatureTag(subject.Digest)); err != nil {
		t.Fatal(err)
	}
	if _, err := Sign(ctx, s, subject, "", k[0].signer); !errors.Is(err, ErrInvalidSignatureManifest) {
		t.Errorf("Sign over an index: %v, want %v", err, ErrInvalidSignatureManifest)
	}
	if _, err := Verify(ctx, s, subject, verifierFor(t, k[0].pub)); !errors.Is(err, ErrInvalidSignatureManifest) {
		t.Errorf("Verify of an index: %v, want %v", err, ErrInvalidSignatureManifest)
	}
}

// readOnly hides a store's pushes: Verify needs only a Reader.
type readOnly struct{ Reader }
