package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// spdxDoc is the part of an SPDX document the suite reads.
type spdxDoc struct {
	SPDXVersion string `json:"spdxVersion"`
	Name        string `json:"name"`
	Packages    []struct {
		SPDXID          string `json:"SPDXID"`
		Name            string `json:"name"`
		VersionInfo     string `json:"versionInfo"`
		LicenseDeclared string `json:"licenseDeclared"`
		Checksums       []struct {
			Algorithm string `json:"algorithm"`
			Value     string `json:"checksumValue"`
		} `json:"checksums"`
		ExternalRefs []struct {
			Type    string `json:"referenceType"`
			Locator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
	ExtractedLicenses []struct {
		LicenseID string `json:"licenseId"`
	} `json:"hasExtractedLicensingInfos"`
}

// cosignAttested reads what the stock cosign verify-attestation --type spdxjson printed:
// the subject digest and the predicate of the statement it verified.
func cosignAttested(t *testing.T, out string) (subject string, predicate json.RawMessage) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		var env struct {
			PayloadType string `json:"payloadType"`
			Payload     string `json:"payload"`
		}
		if json.Unmarshal([]byte(line), &env) != nil || env.Payload == "" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			t.Fatalf("cosign printed an envelope whose payload is not base64: %v", err)
		}
		var st struct {
			Type          string `json:"_type"`
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
			Predicate json.RawMessage `json:"predicate"`
		}
		if err := json.Unmarshal(b, &st); err != nil || len(st.Subject) != 1 {
			t.Fatalf("cosign verified statement %s: %v", b, err)
		}
		if env.PayloadType != "application/vnd.in-toto+json" || st.Type != "https://in-toto.io/Statement/v0.1" || st.PredicateType != "https://spdx.dev/Document" {
			t.Fatalf("cosign verified a %s statement %s of %s, want an in-toto v0.1 SPDX statement", env.PayloadType, st.Type, st.PredicateType)
		}
		return "sha256:" + st.Subject[0].Digest["sha256"], st.Predicate
	}
	t.Fatalf("cosign verify-attestation printed no envelope:\n%s", out)
	return "", nil
}

// TestSBOMAttestationRegistry: a layer published to a real registry (TLS, htpasswd)
// carries its SPDX SBOM as an attestation that the stock cosign verify-attestation
// --type spdxjson accepts with the publisher's key and refuses with another; pylayer sbom
// prints the same document, verify reports it, publishing again adds no attestation, an
// attestation copied onto another layer is refused by cosign and pylayer alike, and an
// interpreter's SBOM names its CPython version and tree digest.
func TestSBOMAttestationRegistry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	repo := r.Ref("team/sbom")
	tls := []string{"--ca-file", r.CAFile}
	start := time.Now()
	p := ci.publish(ctx, t, lk["office"], repo, priv, tls...)
	t.Logf("publish of the office set with its SBOM attestation: %s", time.Since(start).Round(time.Millisecond))

	verifyAtt := func(key, ref string) (string, error) {
		return tool(ctx, t, r, "cosign", "verify-attestation", "--key", key, "--insecure-ignore-tlog=true", "--type", "spdxjson", ref)
	}
	out, err := verifyAtt(pub, p.Ref)
	if err != nil {
		t.Fatalf("cosign verify-attestation --type spdxjson of the published layer: %v\n%s", err, out)
	}
	subject, predicate := cosignAttested(t, out)
	if subject != p.Digest {
		t.Fatalf("cosign verified an SBOM of %s, want %s", subject, p.Digest)
	}
	var doc spdxDoc
	if err := json.Unmarshal(predicate, &doc); err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{} // purl -> declared license
	for _, pk := range doc.Packages {
		for _, ref := range pk.ExternalRefs {
			if ref.Type == "purl" {
				byName[ref.Locator] = pk.LicenseDeclared
			}
		}
		if pk.SPDXID != "SPDXRef-Artifact" && (len(pk.Checksums) != 1 || pk.Checksums[0].Algorithm != "SHA256" || len(pk.Checksums[0].Value) != 64) {
			t.Errorf("package %s: checksums %+v, want its wheel's sha256", pk.Name, pk.Checksums)
		}
	}
	if doc.SPDXVersion != "SPDX-2.3" || !strings.HasPrefix(doc.Name, "base-") || len(byName) != len(officeSet) {
		t.Fatalf("the SBOM %s: want SPDX-2.3, named after the base layer, with a purl for each of %v", predicate, officeSet)
	}
	for _, name := range officeSet {
		found := false
		for purl, lic := range byName {
			if strings.HasPrefix(purl, "pkg:pypi/"+name+"@") {
				found = true
				t.Logf("%s: licenseDeclared %s", purl, lic)
			}
		}
		if !found {
			t.Errorf("the SBOM has no purl of %s: %v", name, byName)
		}
	}
	_, otherPub := ci.keygen(ctx, t, "other")
	if out, err := verifyAtt(otherPub, p.Ref); err == nil {
		t.Fatalf("cosign verify-attestation with another key accepted the SBOM:\n%s", out)
	}

	// pylayer sbom prints exactly the document cosign verified; verify reports it.
	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	got := h.must(ctx, t, append([]string{"sbom", p.Ref, "--trust", pub}, tls...)...)
	if got != string(predicate) {
		t.Fatalf("pylayer sbom printed\n%s\ncosign verified\n%s", got, predicate)
	}
	var ver struct {
		Attestation struct {
			Present, Verified bool
			Manifest          string
		}
	}
	if err := json.Unmarshal([]byte(h.must(ctx, t, append([]string{"verify", p.Ref, "--json", "--trust", pub}, tls...)...)), &ver); err != nil {
		t.Fatal(err)
	}
	if !ver.Attestation.Present || !ver.Attestation.Verified || !strings.HasPrefix(ver.Attestation.Manifest, "sha256:") {
		t.Fatalf("verify --json attestation %+v, want present and verified", ver.Attestation)
	}
	attTag := strings.Replace(p.Digest, ":", "-", 1) + ".att"
	attDigest := strings.TrimSpace(mustTool(ctx, t, r, "crane", "digest", repo+":"+attTag))
	if attDigest != ver.Attestation.Manifest {
		t.Errorf("crane says %s is %s, verify reported %s", attTag, attDigest, ver.Attestation.Manifest)
	}

	// Publishing again writes no second attestation.
	ci.publish(ctx, t, lk["office"], repo, priv, tls...)
	if again := strings.TrimSpace(mustTool(ctx, t, r, "crane", "digest", repo+":"+attTag)); again != attDigest {
		t.Errorf("a second publish changed the attestation manifest: %s -> %s", attDigest, again)
	}

	// The office layer's attestation copied onto another layer: a statement about another
	// digest, refused by both.
	w := ci.publish(ctx, t, lk["wheel"], repo, priv, tls...)
	mustTool(ctx, t, r, "crane", "copy", repo+":"+attTag, repo+":"+strings.Replace(w.Digest, ":", "-", 1)+".att")
	if out, err := verifyAtt(pub, w.Ref); err == nil {
		t.Fatalf("cosign verify-attestation accepted an SBOM copied from another layer:\n%s", out)
	}
	if stderr := h.refuse(ctx, t, append([]string{"sbom", w.Ref, "--trust", pub}, tls...)...); !strings.Contains(stderr, "copied from another artifact") {
		t.Errorf("pylayer sbom of a copied attestation: %s, want a refusal naming the copy", stderr)
	}
	if err := json.Unmarshal([]byte(h.must(ctx, t, append([]string{"verify", w.Ref, "--json", "--trust", pub}, tls...)...)), &ver); err != nil {
		t.Fatal(err)
	}
	if !ver.Attestation.Present || ver.Attestation.Verified {
		t.Errorf("verify --json of a copied attestation: %+v, want present, not verified", ver.Attestation)
	}

	// An interpreter's SBOM: the CPython version and the prefix's tree digest.
	py := publishInterpreter(ctx, t, ci, repo, priv, tls...)
	out, err = verifyAtt(pub, py.Ref)
	if err != nil {
		t.Fatalf("cosign verify-attestation of the interpreter: %v\n%s", err, out)
	}
	if subject, predicate = cosignAttested(t, out); subject != py.Digest {
		t.Fatalf("cosign verified an SBOM of %s, want the interpreter %s", subject, py.Digest)
	}
	var pdoc spdxDoc
	if err := json.Unmarshal([]byte(h.must(ctx, t, append([]string{"sbom", py.Ref, "--trust", pub}, tls...)...)), &pdoc); err != nil {
		t.Fatal(err)
	}
	var cpython string
	for _, pk := range pdoc.Packages {
		if pk.Name == "cpython" && len(pk.Checksums) == 1 && len(pk.Checksums[0].Value) == 64 {
			cpython = pk.VersionInfo
		}
	}
	if !strings.HasPrefix(cpython, "3.11.") || pdoc.Name != py.Tag {
		t.Fatalf("the interpreter's SBOM %s: want cpython 3.11.x with its tree digest, named %s", predicate, py.Tag)
	}
}
