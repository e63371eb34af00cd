package registry

import (
	"context"
	"errors"
	"fmt"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/trust"
)

// Verified is an artifact whose signature was checked against the trust policy.
type Verified struct {
	Ref       Ref
	Desc      v1.Descriptor // the manifest, by digest
	Manifest  []byte        // its bytes, verified against Desc.Digest
	Signature *sign.Result  // nil when the policy accepts unsigned artifacts here
	Unsigned  bool          // verification was skipped by an explicit policy rule
}

// ErrNotPylayer: the manifest is not a pylayer artifact.
var ErrNotPylayer = errors.New("not a pylayer artifact")

// VerifyRef resolves ref in repo to a digest and checks its signature with the keys the
// policy names for the repository, before anything else of the artifact is read. Only
// then are the manifest bytes fetched (and checked against the digest). warn is told
// when the policy skips verification, every time.
func VerifyRef(ctx context.Context, repo Repo, ref Ref, pol *trust.Policy, warn func(string)) (*Verified, error) {
	dec, err := pol.For(repo.Name())
	if err != nil {
		return nil, err
	}
	d := v1.Descriptor{Digest: ref.Digest, MediaType: v1.MediaTypeImageManifest}
	if d.Digest == "" {
		if ref.Tag == "" {
			return nil, fmt.Errorf("%w: %s names no tag or digest", ErrInvalidRef, ref)
		}
		if d, err = repo.Resolve(ctx, ref.Tag); err != nil {
			return nil, err
		}
	}
	v := &Verified{Ref: ref, Desc: d}
	if dec.Unsigned {
		v.Unsigned = true
		if warn != nil {
			warn(fmt.Sprintf("WARNING: NOT verifying the signature of %s@%s: the trust policy accepts unsigned artifacts from %s (rule %q)", repo.Name(), d.Digest, repo.Name(), dec.Rule.Match))
		}
	} else {
		keys, err := sign.LoadVerifier(ctx, dec.Keys...)
		if err != nil {
			return nil, err
		}
		if v.Signature, err = sign.Verify(ctx, repo, d, keys); err != nil {
			return nil, err
		}
	}
	raw, err := repo.Manifest(ctx, d)
	if err != nil {
		return nil, err
	}
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", repo.Name(), d.Digest, err)
	}
	if m.ArtifactType != oci.ArtifactTypeLayer && m.ArtifactType != oci.ArtifactTypePython {
		return nil, fmt.Errorf("%s@%s: %w (artifactType %q)", repo.Name(), d.Digest, ErrNotPylayer, m.ArtifactType)
	}
	v.Desc.Size = int64(len(raw))
	v.Desc.ArtifactType = m.ArtifactType
	v.Manifest = raw
	return v, nil
}

// Pull verifies ref (see VerifyRef) and installs it into the host cache, fetching only the
// blobs the cache lacks; it returns the layer root.
func Pull(ctx context.Context, repo Repo, ref Ref, pol *trust.Policy, c *cache.Cache, progress func(cache.Event), warn func(string)) (string, *Verified, error) {
	v, err := VerifyRef(ctx, repo, ref, pol, warn)
	if err != nil {
		return "", nil, err
	}
	root, err := c.Install(ctx, v.Desc.Digest, v.Manifest, repo.Blob, progress)
	if err != nil {
		return "", nil, err
	}
	return root, v, nil
}
