package publish

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sbom"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
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
	Desc        v1.Descriptor      // the artifact's manifest
	Pushed      bool               // false: the repository had the tag already
	Stats       registry.PushStats // of the push, when Pushed
	Attestation v1.Descriptor      // the attestation manifest (sha256-<hex>.att) holding its signed SBOM
	Attested    bool               // false: the signer's SBOM attestation was there already
}

// Ref is the artifact's reference by digest, REPO@sha256:....
func (r Result) Ref(repo registry.Repo) string { return repo.Name() + "@" + r.Desc.Digest.String() }

// Publish makes sure repo holds the artifact under tag, signed by signer: an existing tag is
// reused as it is, a missing one is built with make and pushed. Then the artifact is signed,
// its SPDX SBOM (oci/sbom) is attached as an in-toto attestation signed by signer (unless
// signer attested it already), and each tag of also points at it.
func Publish(ctx context.Context, repo registry.Repo, tag string, make Make, signer sign.Signer, also ...string) (Result, error) {
	log := logctx.From(ctx)
	var res Result
	var built *oci.Artifact
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
		built = &a
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
	raw, err := repo.Manifest(ctx, res.Desc)
	if err != nil {
		return res, err
	}
	if res.Attestation, res.Attested, err = attestSBOM(ctx, repo, res.Desc, raw, built, signer); err != nil {
		return res, fmt.Errorf("attaching the SBOM of %s: %w", res.Ref(repo), err)
	}
	for _, t := range also {
		if _, err := repo.PushManifest(ctx, raw, res.Desc.MediaType, t); err != nil {
			return res, fmt.Errorf("tagging %s: %w", t, err)
		}
	}
	return res, nil
}

// attestSBOM attaches the SBOM of the artifact with manifest raw to it, as an attestation
// signed by signer, unless signer attested one already. The wheels' METADATA is read from
// built's files when the artifact was just built, else from the repository's blobs (an
// artifact published before pylayer attached SBOMs).
func attestSBOM(ctx context.Context, repo registry.Repo, desc v1.Descriptor, raw []byte, built *oci.Artifact, signer sign.Signer) (v1.Descriptor, bool, error) {
	log := logctx.From(ctx)
	own, err := sign.NewVerifier("the publishing key", signer)
	if err != nil {
		return v1.Descriptor{}, false, err
	}
	r, err := sign.VerifyAttestations(ctx, repo, desc, sign.PredicateTypeSPDX, own)
	switch {
	case err == nil:
		log.Debug("SBOM attested already", "attestation", r.AttestationManifest.Digest)
		return r.AttestationManifest, false, nil
	case errors.Is(err, sign.ErrNoAttestation), errors.Is(err, sign.ErrUntrusted), errors.Is(err, sign.ErrPayloadMismatch):
	default:
		return v1.Descriptor{}, false, err
	}
	var config []byte
	var blobs sbom.Blobs
	if built != nil {
		config, blobs = built.Config, sbom.ArtifactBlobs(*built)
	} else {
		log.Info("the artifact has no SBOM yet: reading its layers from the repository to write one", "digest", desc.Digest)
		if config, err = readConfig(ctx, repo, raw); err != nil {
			return v1.Descriptor{}, false, err
		}
		blobs = repo
	}
	doc, err := sbom.Generate(ctx, raw, config, blobs)
	if err != nil {
		return v1.Descriptor{}, false, err
	}
	st, err := sign.NewStatement(desc.Digest, repo.Name(), sign.PredicateTypeSPDX, doc)
	if err != nil {
		return v1.Descriptor{}, false, err
	}
	d, err := sign.Attest(ctx, repo, desc, st, signer)
	if err != nil {
		return v1.Descriptor{}, false, err
	}
	log.Debug("SBOM attested", "attestation", d.Digest, "bytes", len(doc))
	return d, true, nil
}

// readConfig reads the config blob of the manifest raw (Generate checks its digest).
func readConfig(ctx context.Context, repo registry.Repo, raw []byte) ([]byte, error) {
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return nil, err
	}
	if m.Config.Size < 0 || m.Config.Size > lock.MaxBytes {
		return nil, fmt.Errorf("its config is %d bytes, the limit is %d", m.Config.Size, lock.MaxBytes)
	}
	rc, err := repo.Blob(ctx, m.Config)
	if err != nil {
		return nil, fmt.Errorf("fetching its config: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, m.Config.Size+1))
	if err != nil {
		return nil, fmt.Errorf("fetching its config: %w", err)
	}
	return b, nil
}
