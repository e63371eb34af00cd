package publish

import (
	"context"
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry"
)

// Entry is one platform's artifact of a multi-platform publish: the tag it is published
// under on its own (<kind>-<key>) and how to make it.
type Entry struct {
	Tag  string
	Make Make
}

// IndexResult is what PublishIndex did.
type IndexResult struct {
	Desc    v1.Descriptor // the image index
	Pushed  bool          // false: its first tag pointed at this index already
	Entries []Result      // one per entry, in the order given
}

// Ref is the index's reference by digest, REPO@sha256:....
func (r IndexResult) Ref(repo registry.Repo) string {
	return repo.Name() + "@" + r.Desc.Digest.String()
}

// PublishIndex publishes the artifacts of entries, each as Publish does (under its own tag,
// signed, with its SBOM attested), then puts them under tags as one OCI image index
// (oci.PlatformIndex): the index is pushed under tags[0] (unless that tag names it
// already; its bytes depend only on the entries, so publishing again changes nothing),
// signed by signer, and each other tag pointed at it. Entries must be of one kind and
// differ by platform (oci.PlatformIndex.Encode says why not); at least one tag is needed.
func PublishIndex(ctx context.Context, repo registry.Repo, entries []Entry, signer sign.Signer, tags ...string) (IndexResult, error) {
	log := logctx.From(ctx)
	var res IndexResult
	if len(tags) == 0 {
		return res, errors.New("publishing an image index: no tag to put it under")
	}
	if len(entries) == 0 {
		return res, errors.New("publishing an image index: no artifacts to put in it")
	}
	for _, t := range tags {
		if err := oci.ValidTag(t); err != nil {
			return res, fmt.Errorf("publishing an image index: %w", err)
		}
	}
	var x oci.PlatformIndex
	for _, e := range entries {
		r, err := Publish(ctx, repo, e.Tag, e.Make, signer)
		if err != nil {
			return res, err
		}
		res.Entries = append(res.Entries, r)
		raw, err := repo.Manifest(ctx, r.Desc)
		if err != nil {
			return res, err
		}
		ie, err := oci.EntryOf(raw)
		if err != nil {
			return res, fmt.Errorf("%s: %w", r.Ref(repo), err)
		}
		x.Entries = append(x.Entries, ie)
	}
	raw, desc, err := x.Encode()
	if err != nil {
		return res, err
	}
	res.Desc = desc
	cur, err := repo.Resolve(ctx, tags[0])
	switch {
	case err == nil && cur.Digest == desc.Digest:
		log.Debug("the tag names this index already, not pushing it again", "tag", tags[0])
	case err == nil, errors.Is(err, registry.ErrNotFound):
		if _, err := repo.PushManifest(ctx, raw, desc.MediaType, tags[0]); err != nil {
			return res, fmt.Errorf("pushing the image index %s: %w", tags[0], err)
		}
		res.Pushed = true
		log.Debug("image index pushed", "tag", tags[0], "digest", desc.Digest, "entries", len(x.Entries))
	default:
		return res, fmt.Errorf("resolving %s:%s: %w", repo.Name(), tags[0], err)
	}
	if _, err := sign.Sign(ctx, repo, desc, repo.Name(), signer); err != nil {
		return res, fmt.Errorf("signing %s: %w", res.Ref(repo), err)
	}
	for _, t := range tags[1:] {
		if _, err := repo.PushManifest(ctx, raw, desc.MediaType, t); err != nil {
			return res, fmt.Errorf("tagging %s: %w", t, err)
		}
	}
	return res, nil
}
