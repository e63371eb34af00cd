package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// verified is the part of pylayer verify --json the suites read.
type verified struct {
	Ref        string   `json:"ref"`
	Digest     string   `json:"digest"`
	Verified   bool     `json:"verified"`
	SignedBy   []string `json:"signed_by"`
	Kind       string   `json:"kind"`
	Consistent bool     `json:"consistent"`
	Packages   []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"packages"`
}

var officeSet = []string{"et-xmlfile", "lxml", "openpyxl", "python-docx", "xlsxwriter"}

// checkVerifyJSON runs pylayer verify --json and checks it names the office set, verified.
func checkVerifyJSON(ctx context.Context, t *testing.T, h *host, ref, digest string, extra ...string) {
	t.Helper()
	var v verified
	out := h.must(ctx, t, append([]string{"verify", ref, "--json"}, extra...)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("pylayer verify --json printed %q: %v", out, err)
	}
	var names []string
	for _, p := range v.Packages {
		names = append(names, p.Name)
	}
	if !v.Verified || !v.Consistent || v.Digest != digest || len(v.SignedBy) == 0 || v.Kind != "base" ||
		strings.Join(sortedCopy(names), " ") != strings.Join(officeSet, " ") {
		t.Fatalf("pylayer verify --json = %+v, want the office set %v, verified and consistent, digest %s", v, officeSet, digest)
	}
}

// TestPublishPullRegistry: lock + publish the office set to a real registry (TLS with
// --ca-file, htpasswd auth from DOCKER_CONFIG); the stock cosign verifies the signature,
// crane reads the manifest, pull gives a root Python imports the set from, verify --json
// lists the packages as verified.
func TestPublishPullRegistry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	repo := r.Ref("team/pylayer")
	p := ci.publish(ctx, t, lk["office"], repo, priv, "--ca-file", r.CAFile, "--tag", "current")
	if !p.Pushed || p.Stats.Uploaded != 6 {
		t.Errorf("first publish: pushed=%v stats=%+v, want 6 blobs uploaded (lock + 5 wheels)", p.Pushed, p.Stats)
	}

	t.Run("cosign verify", func(t *testing.T) {
		out := mustTool(ctx, t, r, "cosign", "verify", "--key", pub, "--insecure-ignore-tlog=true", p.Ref)
		if !strings.Contains(out, p.Digest) {
			t.Fatalf("cosign verify printed no payload naming %s:\n%s", p.Digest, out)
		}
		_, otherPub := ci.keygen(ctx, t, "other")
		if out, err := tool(ctx, t, r, "cosign", "verify", "--key", otherPub, "--insecure-ignore-tlog=true", p.Ref); err == nil {
			t.Fatalf("cosign verify with another key accepted the signature:\n%s", out)
		}
	})
	t.Run("crane manifest", func(t *testing.T) {
		out := mustTool(ctx, t, r, "crane", "manifest", p.Ref)
		var m v1.Manifest
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("crane manifest printed %q: %v", out, err)
		}
		if m.ArtifactType != "application/vnd.pylayer.layer.v1" || len(m.Layers) != len(officeSet) {
			t.Fatalf("crane manifest: artifactType %q, %d layers; want application/vnd.pylayer.layer.v1 with %d", m.ArtifactType, len(m.Layers), len(officeSet))
		}
		// Created comes from content (the newest wheel's zip times; the fixture's are the
		// zip format's 1980 epoch), not the clock and not 1970.
		if c := m.Annotations[v1.AnnotationCreated]; c != "1980-01-01T00:00:00Z" {
			t.Errorf("created = %q, want the newest wheel's time 1980-01-01T00:00:00Z", c)
		}
		for _, l := range m.Layers {
			// Titled as what the blob is (oras pull writes it under its title), the wheel
			// named beside it.
			whl := l.Annotations["dev.pylayer.wheel.filename"]
			if l.MediaType != v1.MediaTypeImageLayerGzip || !strings.HasSuffix(whl, ".whl") ||
				l.Annotations[v1.AnnotationTitle] != strings.TrimSuffix(whl, ".whl")+".tar.gz" || len(l.Annotations["dev.pylayer.wheel.sha256"]) != 64 {
				t.Errorf("layer %+v: want a gzip tar titled <wheel>.tar.gz, annotated with its wheel's filename and sha256", l)
			}
		}
		if tagged := mustTool(ctx, t, r, "crane", "digest", repo+":current"); strings.TrimSpace(tagged) != p.Digest {
			t.Errorf("--tag current points at %s, want %s", tagged, p.Digest)
		}
	})
	t.Run("pull and import", func(t *testing.T) {
		h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		// By tag: the tag is resolved, then verified by digest.
		got := h.pull(ctx, t, repo+":"+p.Tag, "--trust", pub, "--ca-file", r.CAFile)
		if got.Digest != p.Digest || !got.Verified {
			t.Fatalf("pull = %+v, want digest %s verified", got, p.Digest)
		}
		importCheck(ctx, t, got.Root)
		// A second pull by digest prints the same root and fetches no blob.
		r.ResetLog()
		if again := h.must(ctx, t, "pull", p.Ref, "--trust", pub, "--ca-file", r.CAFile); again != got.Root {
			t.Fatalf("second pull printed %q, want %q", again, got.Root)
		}
		for _, l := range registryManifest(ctx, t, r, "team/pylayer", p.Digest).Layers {
			if n := r.BlobGETs(l.Digest); n != 0 {
				t.Errorf("second pull fetched blob %s %d times", l.Annotations[v1.AnnotationTitle], n)
			}
		}
		h.must(ctx, t, "doctor")
	})
	t.Run("verify --json", func(t *testing.T) {
		checkVerifyJSON(ctx, t, newHost(t, "DOCKER_CONFIG="+r.DockerConfig), p.Ref, p.Digest, "--trust", pub, "--ca-file", r.CAFile)
	})
	t.Run("publish again is a no-op", func(t *testing.T) {
		again := ci.publish(ctx, t, lk["office"], repo, priv, "--ca-file", r.CAFile)
		if again.Pushed || again.Digest != p.Digest {
			t.Fatalf("second publish = %+v, want the same digest, not pushed", again)
		}
	})
}

// TestPublishPullLayout: the same through an OCI layout directory (oci:DIR). The stock
// cosign has no reader for pylayer's layout, so it checks the signature itself with
// verify-blob: the payload and base64 signature exactly as the layout stores them.
func TestPublishPullLayout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lk := locks(t)
	ci := newHost(t)
	priv, pub := ci.keygen(ctx, t, "ci")
	dir := filepath.Join(sharedDir(t), "layout")
	repo := "oci:" + dir
	p := ci.publish(ctx, t, lk["office"], repo, priv)

	t.Run("cosign verify-blob", func(t *testing.T) {
		payload, sig := layoutSignature(t, dir, p.Digest)
		var claim struct {
			Critical struct {
				Identity struct {
					DockerReference string `json:"docker-reference"`
				} `json:"identity"`
				Image struct {
					Digest string `json:"docker-manifest-digest"`
				} `json:"image"`
			} `json:"critical"`
		}
		b, err := os.ReadFile(payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &claim); err != nil || claim.Critical.Image.Digest != p.Digest || claim.Critical.Identity.DockerReference != repo {
			t.Fatalf("signature payload %s (%v): want digest %s, reference %s", b, err, p.Digest, repo)
		}
		mustTool(ctx, t, nil, "cosign", "verify-blob", "--key", pub, "--signature", sig, "--insecure-ignore-tlog=true", payload)
	})
	t.Run("pull and import", func(t *testing.T) {
		h := newHost(t)
		got := h.pull(ctx, t, repo+":"+p.Tag, "--trust", pub)
		if got.Digest != p.Digest || !got.Verified {
			t.Fatalf("pull = %+v, want digest %s verified", got, p.Digest)
		}
		importCheck(ctx, t, got.Root)
		h.must(ctx, t, "doctor")
	})
	t.Run("verify --json", func(t *testing.T) {
		checkVerifyJSON(ctx, t, newHost(t), p.Ref, p.Digest, "--trust", pub)
	})
}

// layoutSignature finds the classic cosign signature of digest in an OCI layout: the
// manifest tagged sha256-<hex>.sig in index.json, whose first layer is the payload and
// carries the base64 signature as an annotation. It writes both to files for cosign.
func layoutSignature(t *testing.T, dir, digest string) (payloadFile, sigFile string) {
	t.Helper()
	readBlob := func(d string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(digest, ":", "-", 1) + ".sig"
	for _, m := range idx.Manifests {
		if m.Annotations[v1.AnnotationRefName] != want {
			continue
		}
		var sm v1.Manifest
		if err := json.Unmarshal(readBlob(m.Digest.String()), &sm); err != nil || len(sm.Layers) == 0 {
			t.Fatalf("signature manifest %s: %v", m.Digest, err)
		}
		l := sm.Layers[0]
		out := sharedDir(t)
		payloadFile, sigFile = filepath.Join(out, "payload.json"), filepath.Join(out, "payload.sig")
		if err := os.WriteFile(payloadFile, readBlob(l.Digest.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sigFile, []byte(l.Annotations["dev.cosignproject.cosign/signature"]), 0o644); err != nil {
			t.Fatal(err)
		}
		return payloadFile, sigFile
	}
	t.Fatalf("no tag %s in %s/index.json", want, dir)
	return "", ""
}
