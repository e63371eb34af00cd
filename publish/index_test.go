package publish

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// TestPublishIndex: two platforms' artifacts are published and signed on their own, then
// an index of both is pushed under the first tag, signed, and the other tags point at it;
// publishing again pushes and builds nothing; entries of one platform are refused.
func TestPublishIndex(t *testing.T) {
	ctx := context.Background()
	repo, signer, v := fixture(t)
	amd := artifactFor(t, t.TempDir(), "1.0", "manylinux_2_28_x86_64")
	arm := artifactFor(t, t.TempDir(), "1.0", "manylinux_2_28_aarch64")
	builds := 0
	entry := func(tag string, a oci.Artifact) Entry {
		return Entry{Tag: tag, Make: func(context.Context) (oci.Artifact, error) { builds++; return a, nil }}
	}
	entries := []Entry{entry("base-amd", amd), entry("base-arm", arm)}
	res, err := PublishIndex(ctx, repo, entries, signer, "current", "stable")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || len(res.Entries) != 2 || builds != 2 || res.Desc.MediaType != v1.MediaTypeImageIndex {
		t.Fatalf("first publish: %+v after %d builds", res, builds)
	}
	for _, tag := range []string{"current", "stable"} {
		d, err := repo.Resolve(ctx, tag)
		if err != nil || d.Digest != res.Desc.Digest {
			t.Errorf("tag %s names %s, %v; want the index %s", tag, d.Digest, err, res.Desc.Digest)
		}
	}
	for i, tag := range []string{"base-amd", "base-arm"} {
		d, err := repo.Resolve(ctx, tag)
		if err != nil || d.Digest != res.Entries[i].Desc.Digest {
			t.Errorf("entry tag %s names %s, %v; want %s", tag, d.Digest, err, res.Entries[i].Desc.Digest)
		}
		if _, err := sign.Verify(ctx, repo, res.Entries[i].Desc, v); err != nil {
			t.Errorf("entry %s: %v", tag, err)
		}
	}
	if r, err := sign.Verify(ctx, repo, res.Desc, v); err != nil || r.Subject != res.Desc.Digest {
		t.Errorf("the index's signature: %v", err)
	}
	raw, err := repo.Manifest(ctx, res.Desc)
	if err != nil {
		t.Fatal(err)
	}
	x, err := oci.ParseIndex(raw)
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, m := range x.Manifests {
		p, _ := oci.EntryPlatform(m)
		plats = append(plats, p.String()+"="+m.Digest.String())
	}
	want := "linux/amd64=" + res.Entries[0].Desc.Digest.String() + " linux/arm64=" + res.Entries[1].Desc.Digest.String()
	if strings.Join(plats, " ") != want {
		t.Errorf("index entries %v, want %s", plats, want)
	}

	again, err := PublishIndex(ctx, repo, entries, signer, "current")
	if err != nil {
		t.Fatal(err)
	}
	if again.Pushed || builds != 2 || again.Desc.Digest != res.Desc.Digest {
		t.Errorf("second publish: pushed %v, %d builds, index %s; want nothing new and %s", again.Pushed, builds, again.Desc.Digest, res.Desc.Digest)
	}

	// Two entries of one platform cannot share an index, and no index is tagged.
	dup := []Entry{entry("base-amd", amd), entry("base-amd2", artifactFor(t, t.TempDir(), "2.0", "manylinux_2_17_x86_64"))}
	if _, err := PublishIndex(ctx, repo, dup, signer, "dup"); !errors.Is(err, oci.ErrInvalidArtifact) || !strings.Contains(err.Error(), "linux/amd64") {
		t.Errorf("two amd64 entries: %v, want ErrInvalidArtifact naming linux/amd64", err)
	}
	if _, err := repo.Resolve(ctx, "dup"); err == nil {
		t.Error("a refused index was tagged")
	}
	if _, err := PublishIndex(ctx, repo, entries, signer); err == nil {
		t.Error("an index with no tag was published")
	}
}
