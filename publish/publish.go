package publish

import (
	"context"
	"errors"
	"fmt"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry"
)

// Make builds the artifact to push; Publish calls it only when the repository lacks the tag.
type Make func(ctx context.Context) (oci.Artifact, error)

// Layer makes the layer artifact of l from the trees b builds.
func Layer(b *build.Builder, l *lock.Lock) Make {
	return func(ctx context.Context) (oci.Artifact, error) { return oci.LayerArtifact(ctx, b, l) }
}

// Result is what Publish did.
type Result struct {
	Desc   v1.Descriptor      // the artifact's manifest
	Pushed bool               // false: the repository had the tag already
	Stats  registry.PushStats // of the push, when Pushed
}

// Ref is the artifact's reference by digest, REPO@sha256:....
func (r Result) Ref(repo registry.Repo) string { return repo.Name() + "@" + r.Desc.Digest.String() }

// Publish makes sure repo holds the artifact under tag, signed by signer: an existing tag is
// reused as it is, a missing one is built with make and pushed. Then the artifact is signed
// and each tag of also points at it.
func Publish(ctx context.Context, repo registry.Repo, tag string, make Make, signer sign.Signer, also ...string) (Result, error) {
	log := logctx.From(ctx)
	var res Result
	var err error
	res.Desc, err = repo.Resolve(ctx, tag)
	switch {
	case err == nil:
		log.Debug("already published, not pushing again", "tag", tag)
	case errors.Is(err, registry.ErrNotFound):
		a, err := make(ctx)
		if err != nil {
			return res, err
		}
		if res.Desc, res.Stats, err = registry.Push(ctx, repo, a, tag); err != nil {
			return res, err
		}
		res.Pushed = true
		log.Debug("pushed", "tag", tag, "uploaded", res.Stats.Uploaded, "skipped", res.Stats.Skipped, "bytes", res.Stats.BytesUploaded)
	default:
		return res, fmt.Errorf("resolving %s:%s: %w", repo.Name(), tag, err)
	}
	if _, err := sign.Sign(ctx, repo, res.Desc, repo.Name(), signer); err != nil {
		return res, fmt.Errorf("signing %s: %w", res.Ref(repo), err)
	}
	if len(also) == 0 {
		return res, nil
	}
	raw, err := repo.Manifest(ctx, res.Desc)
	if err != nil {
		return res, err
	}
	for _, t := range also {
		if _, err := repo.PushManifest(ctx, raw, res.Desc.MediaType, t); err != nil {
			return res, fmt.Errorf("tagging %s: %w", t, err)
		}
	}
	return res, nil
}
