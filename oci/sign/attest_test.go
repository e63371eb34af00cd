package sign

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// TestPAE: the example of DSSE's protocol specification.
func TestPAE(t *testing.T) {
	got := string(PAE("http://example.com/HelloWorld", []byte("hello world")))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; got != want {
		t.Fatalf("PAE = %q, want %q", got, want)
	}
	if got := string(PAE("", nil)); got != "DSSEv1 0  0 " {
		t.Fatalf("PAE of nothing = %q", got)
	}
}

// TestNewStatement: the bytes cosign's GenerateStatement and json.Marshal give for
// `cosign attest --type spdxjson`: header fields in order, the predicate's keys sorted.
func TestNewStatement(t *testing.T) {
	d := digest.FromString("m")
	got, err := NewStatement(d, "reg:5000/team/pylayer", PredicateTypeSPDX, []byte(`{"spdxVersion":"SPDX-2.3", "SPDXID":"SPDXRef-DOCUMENT","name":"a<b"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://spdx.dev/Document","subject":[{"name":"reg:5000/team/pylayer","digest":{"sha256":"` +
		d.Encoded() + `"}}],"predicate":{"SPDXID":"SPDXRef-DOCUMENT","name":"a\u003cb","spdxVersion":"SPDX-2.3"}}`
	if string(got) != want {
		t.Fatalf("statement\n%s\nwant\n%s", got, want)
	}
	for _, c := range []struct {
		name      string
		subject   digest.Digest
		ptype     string
		predicate string
	}{
		{"reg/x", "sha512:00", PredicateTypeSPDX, `{}`},
		{"", d, PredicateTypeSPDX, `{}`},
		{"reg/x", d, "spdx", `{}`},
		{"reg/x", d, PredicateTypeSPDX, `{`},
	} {
		if _, err := NewStatement(c.subject, c.name, c.ptype, []byte(c.predicate)); err == nil {
			t.Errorf("NewStatement(%q, %q, %q, %q) succeeded", c.subject, c.name, c.ptype, c.predicate)
		}
	}
}

func mustStatement(t *testing.T, s Store, subject v1.Descriptor, predicateType, predicate string) []byte {
	t.Helper()
	st, err := NewStatement(subject.Digest, s.Name(), predicateType, []byte(predicate))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustAttest(t *testing.T, s Store, subject v1.Descriptor, statement []byte, signer Signer) v1.Descriptor {
	t.Helper()
	d, err := Attest(context.Background(), s, subject, statement, signer)
	if err != nil {
		t.Fatalf("Attest: %v", err)
	}
	return d
}

// readAtt returns the attestation manifest of subject.
func readAtt(t *testing.T, s Reader, subject v1.Descriptor) (*SignatureManifest, []byte) {
	t.Helper()
	ctx := context.Background()
	d, err := s.Resolve(ctx, AttestationTag(subject.Digest))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.Manifest(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := ParseAttestationManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	return sm, raw
}

// editAtt rewrites the attestation manifest of subject with edit (which may push blobs)
// and pushes it under the attestation tag of target.
func editAtt(t *testing.T, s Store, subject, target v1.Descriptor, edit func(m *ggcr.Manifest)) {
	t.Helper()
	_, raw := readAtt(t, s, subject)
	var m ggcr.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushManifest(context.Background(), b, string(m.MediaType), AttestationTag(target.Digest)); err != nil {
		t.Fatal(err)
	}
}

// replaceEnvelope makes the first layer of m an envelope edit derives from its own.
func replaceEnvelope(t *testing.T, s Store, m *ggcr.Manifest, edit func(e *Envelope)) {
	t.Helper()
	ctx := context.Background()
	l := m.Layers[0]
	rc, err := s.Blob(ctx, v1.Descriptor{Digest: digest.Digest(l.Digest.String()), Size: l.Size})
	if err != nil {
		t.Fatal(err)
	}
	var e Envelope
	if err := json.NewDecoder(rc).Decode(&e); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	edit(&e)
	b, _ := json.Marshal(e)
	nd, _, _ := layerOf(b, MediaTypeDSSE, l.Annotations)
	if _, err := s.PushBlob(ctx, toSpec(nd), func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }); err != nil {
		t.Fatal(err)
	}
	m.Layers[0] = nd
}

func TestAttestVerify(t *testing.T) {
	k := testKeys(t)
	const sbom = `{"name":"base-k","spdxVersion":"SPDX-2.3"}` // canonical: carried unchanged
	trusted := func(t *testing.T) *Verifier { return verifierFor(t, k[0].pub) }
	cases := []struct {
		name    string
		setup   func(t *testing.T, s Store, subject, other v1.Descriptor)
		trust   func(t *testing.T) *Verifier
		wantErr error // nil: verifies
		check   func(t *testing.T, s Store, subject v1.Descriptor, r *AttestationResult)
	}{{
		name: "attested by trusted key",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, sbom), k[0].signer)
		},
		trust: trusted,
		check: func(t *testing.T, s Store, subject v1.Descriptor, r *AttestationResult) {
			a := r.Last()
			if len(r.Verified) != 1 || r.Rejected != 0 || a.KeyID != k[0].id || a.SubjectName != s.Name() {
				t.Fatalf("result %+v", r)
			}
			if a.Statement.PredicateType != PredicateTypeSPDX || string(a.Statement.Predicate) != sbom {
				t.Fatalf("statement %+v, want the SBOM %s", a.Statement, sbom)
			}
			if _, err := s.Resolve(context.Background(), SignatureTag(subject.Digest)); err == nil {
				t.Fatal("attesting wrote a signature tag")
			}
		},
	}, {
		name:    "no attestation",
		setup:   func(*testing.T, Store, v1.Descriptor, v1.Descriptor) {},
		trust:   trusted,
		wantErr: ErrNoAttestation,
	}, {
		name: "attested by another key",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, sbom), k[1].signer)
		},
		trust:   trusted,
		wantErr: ErrUntrusted,
	}, {
		name: "only another predicate type",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustAttest(t, s, subject, mustStatement(t, s, subject, "https://slsa.dev/provenance/v1", `{}`), k[0].signer)
		},
		trust:   trusted,
		wantErr: ErrNoAttestation,
	}, {
		name: "a lying annotation does not change the type",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustAttest(t, s, subject, mustStatement(t, s, subject, "https://slsa.dev/provenance/v1", `{}`), k[0].signer)
			editAtt(t, s, subject, subject, func(m *ggcr.Manifest) { m.Layers[0].Annotations[AnnotationPredicateType] = PredicateTypeSPDX })
		},
		trust:   trusted,
		wantErr: ErrNoAttestation,
	}, {
		name: "copied from another artifact",
		setup: func(t *testing.T, s Store, subject, other v1.Descriptor) {
			mustAttest(t, s, other, mustStatement(t, s, other, PredicateTypeSPDX, sbom), k[0].signer)
			editAtt(t, s, other, subject, func(*ggcr.Manifest) {})
		},
		trust:   trusted,
		wantErr: ErrPayloadMismatch,
	}, {
		name: "tampered statement",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, sbom), k[0].signer)
			editAtt(t, s, subject, subject, func(m *ggcr.Manifest) {
				replaceEnvelope(t, s, m, func(e *Envelope) {
					p, _ := base64.StdEncoding.DecodeString(e.Payload)
					e.Payload = base64.StdEncoding.EncodeToString(bytes.Replace(p, []byte("base-k"), []byte("base-x"), 1))
				})
			})
		},
		trust:   trusted,
		wantErr: ErrUntrusted,
	}, {
		name: "tampered payload type",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, sbom), k[0].signer)
			editAtt(t, s, subject, subject, func(m *ggcr.Manifest) {
				replaceEnvelope(t, s, m, func(e *Envelope) { e.PayloadType = "application/json" })
			})
		},
		trust:   trusted,
		wantErr: ErrUntrusted,
	}, {
		name: "attesting again is idempotent, a new statement is appended",
		setup: func(t *testing.T, s Store, subject, _ v1.Descriptor) {
			st := mustStatement(t, s, subject, PredicateTypeSPDX, sbom)
			a := mustAttest(t, s, subject, st, k[0].signer)
			if b := mustAttest(t, s, subject, st, k[0].signer); a.Digest != b.Digest {
				t.Fatalf("the same statement again changed the manifest: %s -> %s", a.Digest, b.Digest)
			}
			// The other key's attestation of the same statement is not a duplicate.
			mustAttest(t, s, subject, st, k[1].signer)
			mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, `{"name":"newer"}`), k[0].signer)
		},
		trust: trusted,
		check: func(t *testing.T, s Store, subject v1.Descriptor, r *AttestationResult) {
			if len(r.Verified) != 2 || r.Rejected != 1 || string(r.Last().Statement.Predicate) != `{"name":"newer"}` {
				t.Fatalf("%d verified, %d rejected, last %s; want 2, 1, the newer", len(r.Verified), r.Rejected, r.Last().Statement.Predicate)
			}
			if sm, _ := readAtt(t, s, subject); len(sm.Attestations()) != 3 {
				t.Fatalf("%d attestation layers, want 3", len(sm.Attestations()))
			}
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stores(t, func(t *testing.T, s Store) {
				subject := pushSubject(t, s, "subject")
				other := pushSubject(t, s, "other")
				c.setup(t, s, subject, other)
				r, err := VerifyAttestations(context.Background(), readOnly{s}, subject, PredicateTypeSPDX, c.trust(t))
				if c.wantErr != nil {
					if !errors.Is(err, c.wantErr) {
						t.Fatalf("VerifyAttestations: got %v, want %v", err, c.wantErr)
					}
					if r != nil {
						t.Fatal("a failed VerifyAttestations returned a result")
					}
					return
				}
				if err != nil {
					t.Fatalf("VerifyAttestations: %v", err)
				}
				if r.Subject != subject.Digest || r.AttestationManifest.Digest == "" {
					t.Fatalf("result %+v", r)
				}
				if c.check != nil {
					c.check(t, s, subject, r)
				}
			})
		})
	}
}

// TestAttestManifestFormat: the layer and manifest `cosign attest` writes in tag mode.
func TestAttestManifestFormat(t *testing.T) {
	k := testKeys(t)
	s := newLayoutStore(t)
	subject := pushSubject(t, s, "format")
	st := mustStatement(t, s, subject, PredicateTypeSPDX, `{"a":1}`)
	mustAttest(t, s, subject, st, k[0].signer)
	sm, raw := readAtt(t, s, subject)
	var m ggcr.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 1 || m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Fatalf("manifest %s", raw)
	}
	l := m.Layers[0]
	ann, _ := json.Marshal(l.Annotations)
	if l.MediaType != MediaTypeDSSE || string(ann) != `{"dev.cosignproject.cosign/signature":"","predicateType":"https://spdx.dev/Document"}` {
		t.Fatalf("layer %s %s, want %s with cosign's annotations", l.MediaType, ann, MediaTypeDSSE)
	}
	if len(sm.Signatures()) != 0 {
		t.Fatal("an attestation counted as a signature")
	}
	body, err := readBlob(context.Background(), s, toSpec(l), maxAttestationSize)
	if err != nil {
		t.Fatal(err)
	}
	e, payload, err := ParseEnvelope(body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, st) || e.PayloadType != PayloadTypeInToto || len(e.Signatures) != 1 || e.Signatures[0].KeyID != "" {
		t.Fatalf("envelope %s", body)
	}
	if !strings.HasPrefix(string(body), `{"payloadType":"application/vnd.in-toto+json","payload":"`) || !strings.HasSuffix(string(body), `"}]}`) ||
		!strings.Contains(string(body), `"signatures":[{"keyid":"","sig":"`) {
		t.Fatalf("envelope bytes %s are not shaped as cosign's", body)
	}
	if !verifyMessage(k[0].signer.Public(), PAE(PayloadTypeInToto, st), mustB64(t, e.Signatures[0].Sig)) {
		t.Fatal("the envelope's signature is not over PAE(type, statement)")
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAttestRejects(t *testing.T) {
	k := testKeys(t)
	s := newLayoutStore(t)
	subject := pushSubject(t, s, "rejects")
	other := pushSubject(t, s, "rejects-other")
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		statement []byte
		signer    Signer
	}{
		{"no signer", mustStatement(t, s, subject, PredicateTypeSPDX, `{}`), nil},
		{"statement about another artifact", mustStatement(t, s, other, PredicateTypeSPDX, `{}`), k[0].signer},
		{"not a statement", []byte(`{"_type":"x","predicateType":"y"}`), k[0].signer},
		{"not JSON", []byte(`{`), k[0].signer},
	} {
		if _, err := Attest(ctx, s, subject, c.statement, c.signer); err == nil {
			t.Errorf("%s: Attest succeeded", c.name)
		}
	}
	if _, err := s.Resolve(ctx, AttestationTag(subject.Digest)); err == nil {
		t.Fatal("a refused Attest wrote the attestation tag")
	}
}

func TestParseEnvelopeRejects(t *testing.T) {
	for _, b := range []string{
		``, `[]`, `{"payloadType":"t","payload":"e30=","signatures":[]}`,
		`{"payloadType":"t","payload":"e30","signatures":[{"sig":"AA=="}]}`,
		`{"payloadType":"t","payload":"e30=","signatures":[{"sig":"A-_"}]}`,
		`{"payloadType":"t","payload":"e30=","signatures":[{"sig":""}]}`,
	} {
		if _, _, err := ParseEnvelope([]byte(b)); !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("ParseEnvelope(%s) = %v, want %v", b, err, ErrInvalidEnvelope)
		}
	}
}

func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"","sig":"AA=="}]}`))
	f.Add([]byte(`{"payloadType":"","payload":"","signatures":[{"sig":"A"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, payload, err := ParseEnvelope(b)
		if err != nil {
			return
		}
		if len(e.Signatures) == 0 {
			t.Fatalf("accepted an envelope without signatures: %q", b)
		}
		_, _ = parseStatement(payload)
	})
}
