package registry

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/registry"

	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// newReferrersServer is newServer with go-containerregistry's referrers API turned on.
func newReferrersServer(t *testing.T) *server {
	t.Helper()
	s := newServer(t, false)
	s.reg = ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)), ggcr.WithReferrersSupport(true))
	return s
}

// deleteTag removes tag from the registry's repository path.
func (s *server) deleteTag(t *testing.T, path, tag string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, s.URL+"/v2/"+path+"/manifests/"+tag, nil)
	must(t, err)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE %s: %s", tag, resp.Status)
	}
}

// untagLayout removes tag from the index.json of the layout dir.
func untagLayout(t *testing.T, dir, tag string) {
	t.Helper()
	p := filepath.Join(dir, "index.json")
	b, err := os.ReadFile(p)
	must(t, err)
	var idx v1.Index
	must(t, json.Unmarshal(b, &idx))
	kept := idx.Manifests[:0]
	for _, m := range idx.Manifests {
		if m.Annotations[v1.AnnotationRefName] != tag {
			kept = append(kept, m)
		}
	}
	if len(kept) == len(idx.Manifests) {
		t.Fatalf("no tag %s in %s", tag, p)
	}
	idx.Manifests = kept
	b, err = json.Marshal(idx)
	must(t, err)
	must(t, os.WriteFile(p, b, 0o644))
}

// TestSignReferrerRoundTrip: through a Repo of each kind, Sign stores the signature as a
// referrer (listed by the referrers API, or by the fallback tag a registry without it
// and a layout get), Verify finds it there once the classic tag is gone, and an
// artifact whose tag verifies costs no referrers request.
func TestSignReferrerRoundTrip(t *testing.T) {
	k := newKey(t, "k")
	keys, err := sign.LoadVerifier(context.Background(), k.pub)
	must(t, err)
	for _, c := range []struct {
		name  string
		api   bool
		open  func(t *testing.T) (Repo, *server, string)
		untag func(t *testing.T, s *server, dir, tag string)
	}{
		{"registry with referrers API", true, func(t *testing.T) (Repo, *server, string) {
			s := newReferrersServer(t)
			return openRepo(t, s, "team/pylayer", quick()), s, ""
		}, func(t *testing.T, s *server, _, tag string) { s.deleteTag(t, "team/pylayer", tag) }},
		{"registry without it", false, func(t *testing.T) (Repo, *server, string) {
			s := newServer(t, false)
			return openRepo(t, s, "team/pylayer", quick()), s, ""
		}, func(t *testing.T, s *server, _, tag string) { s.deleteTag(t, "team/pylayer", tag) }},
		{"layout", false, func(t *testing.T) (Repo, *server, string) {
			dir := filepath.Join(t.TempDir(), "layout")
			return openLayout(t, dir), nil, dir
		}, func(t *testing.T, _ *server, dir, tag string) { untagLayout(t, dir, tag) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r, s, dir := c.open(t)
			desc, _, err := Push(ctx, r, artifact("k", layerBlob(t, "a", "A = 1\n")), "base-k")
			must(t, err)
			if _, err := sign.Sign(ctx, r, desc, r.Name(), k.signer); err != nil {
				t.Fatalf("Sign: %v", err)
			}
			fb, err := r.Resolve(ctx, sign.FallbackTag(desc.Digest))
			if c.api != errors.Is(err, ErrNotFound) {
				t.Fatalf("fallback tag %s with the referrers API %v: %+v, %v", sign.FallbackTag(desc.Digest), c.api, fb, err)
			}
			if !c.api && fb.MediaType != v1.MediaTypeImageIndex {
				t.Fatalf("fallback tag names a %q, want an image index", fb.MediaType)
			}
			if rl, ok := r.(sign.ReferrersLister); ok {
				refs, err := rl.Referrers(ctx, desc.Digest)
				switch {
				case c.api && (err != nil || len(refs) != 1 || refs[0].ArtifactType != sign.ArtifactTypeSignature):
					t.Fatalf("Referrers = %+v, %v; want one signature", refs, err)
				case !c.api && !errors.Is(err, ErrNotFound):
					t.Fatalf("Referrers of a registry without the API = %+v, %v; want ErrNotFound", refs, err)
				}
			} else if s != nil {
				t.Fatal("a remote Repo lists no referrers")
			}

			var before int
			if s != nil {
				before = s.count(http.MethodGet, "/referrers/")
			}
			res, err := sign.Verify(ctx, r, desc, keys)
			if err != nil || res.Source != sign.SourceTag {
				t.Fatalf("Verify = %+v, %v; want the tag", res, err)
			}
			if s != nil && s.count(http.MethodGet, "/referrers/") != before {
				t.Fatal("Verify of a tag that verifies asked for the referrers")
			}

			c.untag(t, s, dir, sign.SignatureTag(desc.Digest))
			res, err = sign.Verify(ctx, r, desc, keys)
			if err != nil {
				t.Fatalf("Verify without the tag: %v", err)
			}
			if res.Source != sign.SourceReferrer || res.SignatureManifest.ArtifactType != sign.ArtifactTypeSignature || res.Verified[0].DockerReference != r.Name() {
				t.Fatalf("Verify without the tag = %+v, want the referrer", res)
			}
		})
	}
}

// TestReferrersAnswers: how Referrers reads what a registry answers.
func TestReferrersAnswers(t *testing.T) {
	ctx := context.Background()
	subject := digest.FromString("subject")
	good := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` +
		digest.FromString("referrer").String() + `","size":10,"artifactType":"` + sign.ArtifactTypeSignature + `"}]}`
	for _, c := range []struct {
		name        string
		status      int
		contentType string
		body        string
		notFound    bool   // the API is missing: errors.Is(err, ErrNotFound)
		wantErr     string // else an error containing this ("" for none)
	}{
		{name: "an index", status: 200, contentType: v1.MediaTypeImageIndex, body: good},
		{name: "404", status: 404, notFound: true},
		{name: "400", status: 400, notFound: true},
		{name: "406", status: 406, notFound: true},
		{name: "200, not an index", status: 200, contentType: "text/html", body: "<html>", notFound: true},
		{name: "500", status: 500, wantErr: "500"},
		{name: "403", status: 403, wantErr: "access denied"},
		{name: "an index that does not decode", status: 200, contentType: v1.MediaTypeImageIndex, body: "{", wantErr: "does not decode"},
		{name: "a descriptor with a bad digest", status: 200, contentType: v1.MediaTypeImageIndex, wantErr: "invalid",
			body: `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"md5:00","size":1}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, false)
			r := openRepo(t, s, "team/pylayer", Options{Retries: 1})
			s.setFault(func(w http.ResponseWriter, req *http.Request) bool {
				if !strings.Contains(req.URL.Path, "/referrers/") {
					return false
				}
				if req.URL.Path != "/v2/team/pylayer/referrers/"+subject.String() || req.Header.Get("Accept") != v1.MediaTypeImageIndex {
					t.Errorf("asked %s with Accept %q", req.URL.Path, req.Header.Get("Accept"))
				}
				if c.contentType != "" {
					w.Header().Set("Content-Type", c.contentType)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
				return true
			})
			refs, err := r.(sign.ReferrersLister).Referrers(ctx, subject)
			switch {
			case c.notFound:
				if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no referrers API") {
					t.Fatalf("Referrers = %+v, %v; want ErrNotFound", refs, err)
				}
			case c.wantErr != "":
				if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Referrers = %+v, %v; want an error with %q", refs, err, c.wantErr)
				}
			default:
				if err != nil || len(refs) != 1 || refs[0].ArtifactType != sign.ArtifactTypeSignature || refs[0].Size != 10 {
					t.Fatalf("Referrers = %+v, %v", refs, err)
				}
			}
		})
	}
	if _, err := openRepo(t, newServer(t, false), "team/pylayer", quick()).(sign.ReferrersLister).Referrers(ctx, "sha256:xyz"); !errors.Is(err, ErrInvalidRef) {
		t.Fatalf("Referrers of a malformed digest: %v", err)
	}
}
