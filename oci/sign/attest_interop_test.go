package sign

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/pylayer/pylayer/internal/testenv"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// interopSBOM is a small SPDX 2.3 document, in the canonical form NewStatement keeps.
const interopSBOM = `{"SPDXID":"SPDXRef-DOCUMENT","creationInfo":{"created":"1970-01-01T00:00:00Z","creators":["Tool: pylayer"]},"dataLicense":"CC0-1.0","documentNamespace":"https://spdx.org/spdxdocs/pylayer-base-k","name":"base-k","packages":[{"SPDXID":"SPDXRef-Package-six","downloadLocation":"NOASSERTION","name":"six","versionInfo":"1.16.0"}],"spdxVersion":"SPDX-2.3"}`

// TestInteropAttestStockCosign: `cosign verify-attestation --type spdxjson` accepts what
// Attest writes, VerifyAttestations accepts what `cosign attest --type spdxjson` writes
// (and the bytes are the same but for the signature), and both refuse the same tampering.
func TestInteropAttestStockCosign(t *testing.T) {
	testenv.Integration(t, "the stock cosign CLI (make tools)")
	bin := cosignBinary(t)
	k := testKeys(t)
	ctx := context.Background()
	s, _ := newRegistry(t)
	ref := func(d v1.Descriptor) string { return s.Name() + "@" + d.Digest.String() }
	verifyArgs := func(pub string, d v1.Descriptor) []string {
		return []string{"verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", "spdxjson",
			"--allow-insecure-registry", "--allow-http-registry", ref(d)}
	}
	// cosignPredicate decodes the statement of the envelope cosign printed.
	cosignPredicate := func(t *testing.T, out string) Statement {
		t.Helper()
		for _, line := range strings.Split(out, "\n") {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			_, payload, err := ParseEnvelope([]byte(line))
			if err != nil {
				t.Fatalf("cosign printed %q: %v", line, err)
			}
			st, err := parseStatement(payload)
			if err != nil {
				t.Fatal(err)
			}
			return *st
		}
		t.Fatalf("cosign verify-attestation printed no envelope:\n%s", out)
		return Statement{}
	}

	t.Run("pylayer attests, cosign verifies", func(t *testing.T) {
		subject := pushSubject(t, s, "attest-ours")
		mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, interopSBOM), k[0].signer)
		out, err := runCosign(t, bin, verifyArgs(k[0].pub, subject)...)
		if err != nil {
			t.Fatalf("cosign verify-attestation of our attestation: %v\n%s", err, out)
		}
		if st := cosignPredicate(t, out); string(st.Predicate) != interopSBOM || st.Subject[0].Digest["sha256"] != subject.Digest.Encoded() {
			t.Fatalf("cosign verified %+v, want our SBOM about %s", st, subject.Digest)
		}
		if out, err := runCosign(t, bin, verifyArgs(k[1].pub, subject)...); err == nil {
			t.Fatalf("cosign verify-attestation with another key accepted our attestation:\n%s", out)
		}
		// Another predicate type is not an SPDX attestation to cosign either.
		other := pushSubject(t, s, "attest-slsa")
		mustAttest(t, s, other, mustStatement(t, s, other, "https://slsa.dev/provenance/v1", `{}`), k[0].signer)
		if out, err := runCosign(t, bin, verifyArgs(k[0].pub, other)...); err == nil {
			t.Fatalf("cosign verify-attestation --type spdxjson accepted a provenance attestation:\n%s", out)
		}
	})

	t.Run("cosign attests, pylayer verifies", func(t *testing.T) {
		subject := pushSubject(t, s, "attest-theirs")
		pred := filepath.Join(t.TempDir(), "sbom.spdx.json")
		if err := os.WriteFile(pred, []byte(interopSBOM), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := runCosign(t, bin, "attest", "--key", k[0].priv, "--type", "spdxjson", "--predicate", pred, "--tlog-upload=false", "--yes",
			"--allow-insecure-registry", "--allow-http-registry", ref(subject)); err != nil {
			t.Fatalf("cosign attest: %v\n%s", err, out)
		}
		r, err := VerifyAttestations(ctx, s, subject, PredicateTypeSPDX, verifierFor(t, k[0].pub))
		if err != nil {
			t.Fatalf("VerifyAttestations of cosign's attestation: %v", err)
		}
		if got := string(r.Last().Statement.Predicate); got != interopSBOM || r.Last().SubjectName != s.Name() {
			t.Fatalf("cosign's attestation: predicate %s about %q, want %s about %q", got, r.Last().SubjectName, interopSBOM, s.Name())
		}
		if _, err := VerifyAttestations(ctx, s, subject, PredicateTypeSPDX, verifierFor(t, k[1].pub)); !errors.Is(err, ErrUntrusted) {
			t.Fatalf("VerifyAttestations with another key: %v, want %v", err, ErrUntrusted)
		}

		// The statement cosign signed is NewStatement's; its layer and manifest are what
		// Attest writes for that envelope.
		sm, raw := readAtt(t, s, subject)
		l := sm.Attestations()[0]
		body, err := readBlob(ctx, s, l, maxAttestationSize)
		if err != nil {
			t.Fatal(err)
		}
		_, payload, err := ParseEnvelope(body)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustStatement(t, s, subject, PredicateTypeSPDX, interopSBOM); !bytes.Equal(payload, want) {
			t.Fatalf("cosign's statement\n%s\nNewStatement's\n%s", payload, want)
		}
		h, _ := ggcr.NewHash(l.Digest.String())
		ours, _, err := appendSignature(nil, nil, ggcr.Descriptor{MediaType: MediaTypeDSSE, Size: l.Size, Digest: h,
			Annotations: map[string]string{AnnotationPredicateType: PredicateTypeSPDX, AnnotationSignature: ""}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, raw) {
			t.Fatalf("cosign wrote\n%s\nAttest would write\n%s", raw, ours)
		}

		// Appending ours to cosign's manifest keeps both valid for cosign.
		mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, `{"name":"ours"}`), k[1].signer)
		for _, pub := range []string{k[0].pub, k[1].pub} {
			if out, err := runCosign(t, bin, verifyArgs(pub, subject)...); err != nil {
				t.Fatalf("cosign verify-attestation --key %s after appending: %v\n%s", filepath.Base(pub), err, out)
			}
		}
	})

	t.Run("tampered or copied attestations fail in cosign too", func(t *testing.T) {
		subject := pushSubject(t, s, "attest-tampered")
		other := pushSubject(t, s, "attest-copied")
		mustAttest(t, s, subject, mustStatement(t, s, subject, PredicateTypeSPDX, interopSBOM), k[0].signer)
		editAtt(t, s, subject, other, func(*ggcr.Manifest) {}) // copy onto other's tag
		editAtt(t, s, subject, subject, func(m *ggcr.Manifest) {
			replaceEnvelope(t, s, m, func(e *Envelope) {
				p, _ := base64.StdEncoding.DecodeString(e.Payload)
				var st map[string]any
				if err := json.Unmarshal(p, &st); err != nil {
					t.Fatal(err)
				}
				st["predicate"].(map[string]any)["name"] = "base-forged"
				p, _ = json.Marshal(st)
				e.Payload = base64.StdEncoding.EncodeToString(p)
			})
		})
		for _, c := range []struct {
			d    v1.Descriptor
			want error
		}{{subject, ErrUntrusted}, {other, ErrPayloadMismatch}} {
			if out, err := runCosign(t, bin, verifyArgs(k[0].pub, c.d)...); err == nil {
				t.Fatalf("cosign verify-attestation accepted %s:\n%s", c.want, out)
			}
			if _, err := VerifyAttestations(ctx, s, c.d, PredicateTypeSPDX, verifierFor(t, k[0].pub)); !errors.Is(err, c.want) {
				t.Fatalf("VerifyAttestations: %v, want %v", err, c.want)
			}
		}
	})
}
