//go:build !lean

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci/sbom"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// verifiedSBOM is the attestation part of verify --json.
type verifiedSBOM struct {
	Verified    bool `json:"verified"`
	Attestation struct {
		PredicateType string   `json:"predicate_type"`
		Present       bool     `json:"present"`
		Verified      bool     `json:"verified"`
		SignedBy      []string `json:"signed_by"`
		Manifest      string   `json:"manifest"`
		Problem       string   `json:"problem"`
	} `json:"attestation"`
}

// TestPublishSBOM: publish attaches the SBOM; sbom prints it after verifying it, the same
// bytes every time; verify reports it; an artifact that lost its attestation is reported
// as such, sbom refuses it, and publishing it again attests it again; a policy with no key
// for the repository verifies no SBOM.
func TestPublishSBOM(t *testing.T) {
	e := newEnv(t)
	prefix := e.path("cosign")
	if _, _, err := e.run("keygen", "--output-key-prefix", prefix); err != nil {
		t.Fatal(err)
	}
	priv, pub := prefix+".key", prefix+".pub"
	e.must(nil, args("lock", "foo", "--index-url", e.index, tgtFlags, "-o", e.path("base.lock.json"))...)
	repoDir := e.path("repo")
	repo := "oci:" + repoDir
	var p struct {
		Ref, Digest, Attestation string
	}
	e.must(&p, "publish", e.path("base.lock.json"), "--repo", repo, "--key", priv, "--index-url", e.index, "--tag", "current", "--json")
	if !strings.HasPrefix(p.Attestation, "sha256:") {
		t.Fatalf("publish --json: attestation %q, want the digest of its attestation manifest", p.Attestation)
	}

	doc := e.must(nil, "sbom", repo+":current", "--trust", pub)
	var js struct {
		Ref, Digest, Attestation string
		SignedBy                 string `json:"signed_by"`
		SPDXJSON                 string `json:"spdx_json"`
	}
	e.must(&js, "sbom", p.Ref, "--trust", pub, "--json")
	if js.SPDXJSON != doc || js.Ref != p.Ref || js.Digest != p.Digest || js.Attestation != p.Attestation || !strings.HasPrefix(js.SignedBy, "sha256:") {
		t.Errorf("sbom --json: %+v, want the document printed before (%d bytes) and the attestation %s", js, len(doc), p.Attestation)
	}
	d, err := sbom.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var purls []string
	for _, pk := range d.Packages[1:] {
		purls = append(purls, pk.Purl())
	}
	if d.SPDXVersion != "SPDX-2.3" || !strings.HasPrefix(d.Name, "base-") || strings.Join(purls, " ") != "pkg:pypi/foo@1.0 pkg:pypi/pin@1.0" ||
		!strings.Contains(d.DocumentNamespace, strings.TrimPrefix(p.Digest, "sha256:")) {
		t.Fatalf("sbom printed %s", doc)
	}

	var ver verifiedSBOM
	e.must(&ver, "verify", p.Ref, "--trust", pub, "--json")
	if a := ver.Attestation; !ver.Verified || !a.Present || !a.Verified || a.PredicateType != "https://spdx.dev/Document" || len(a.SignedBy) != 1 || a.Manifest != p.Attestation || a.Problem != "" {
		t.Errorf("verify --json: %+v", ver)
	}
	if text := e.must(nil, "verify", p.Ref, "--trust", pub); !strings.Contains(text, "sbom:") || !strings.Contains(text, "attested, verified") {
		t.Errorf("verify printed no verified SBOM line:\n%s", text)
	}

	// A policy that accepts the repository unsigned has no key to check the SBOM with.
	policy := e.path("policy.json")
	if err := os.WriteFile(policy, []byte(`{"repositories":[{"match":"`+repo+`","insecure_accept_unsigned":true}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.run("sbom", p.Ref, "--trust", policy); err == nil || !strings.Contains(err.Error(), "no trusted key") {
		t.Errorf("sbom under an unsigned policy: %v, want a refusal naming the missing key", err)
	}
	e.must(&ver, "verify", p.Ref, "--trust", policy, "--json")
	if a := ver.Attestation; !a.Present || a.Verified || a.Problem == "" {
		t.Errorf("verify --json under an unsigned policy: %+v, want the attestation present, not verified", a)
	}

	// Another key signed neither the artifact nor the SBOM: sbom refuses at the signature.
	other := e.path("other")
	if _, _, err := e.run("keygen", "--output-key-prefix", other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.run("sbom", p.Ref, "--trust", other+".pub"); err == nil {
		t.Error("sbom trusting another key succeeded")
	}

	// The attestation tag removed: verify says so, sbom refuses, publish attests again.
	dropTag(t, repoDir, "sha256-"+strings.TrimPrefix(p.Digest, "sha256:")+".att")
	e.must(&ver, "verify", p.Ref, "--trust", pub, "--json")
	if a := ver.Attestation; !ver.Verified || a.Present || a.Verified || !strings.Contains(a.Problem, "no attestation") {
		t.Errorf("verify --json without the attestation: %+v", ver)
	}
	if _, _, err := e.run("sbom", p.Ref, "--trust", pub); err == nil || !strings.Contains(err.Error(), "pylayer publish") {
		t.Errorf("sbom without an attestation: %v, want a refusal saying how to attest", err)
	}
	e.must(nil, "publish", e.path("base.lock.json"), "--repo", repo, "--key", priv, "--index-url", e.index)
	if again := e.must(nil, "sbom", p.Ref, "--trust", pub); again != doc {
		t.Errorf("the SBOM attested again differs:\n%s\n%s", doc, again)
	}
}

// dropTag removes tag from the index.json of the OCI layout dir.
func dropTag(t *testing.T, dir, tag string) {
	t.Helper()
	p := filepath.Join(dir, "index.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	var kept []v1.Descriptor
	for _, m := range idx.Manifests {
		if m.Annotations[v1.AnnotationRefName] != tag {
			kept = append(kept, m)
		}
	}
	if len(kept) == len(idx.Manifests) {
		t.Fatalf("no tag %s in %s", tag, p)
	}
	idx.Manifests = kept
	if b, err = json.Marshal(idx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
