package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/interp"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/trust"
)

// Verified is an artifact whose signature was checked against the trust policy, and whose
// manifest was checked against its config.
type Verified struct {
	Ref       Ref
	Desc      v1.Descriptor  // the manifest, by digest
	Manifest  []byte         // its bytes, verified against Desc.Digest
	Config    []byte         // the config blob (the lock, or an interpreter's config), verified
	Signature *sign.Result   // nil when the policy accepts unsigned artifacts here
	Unsigned  bool           // verification was skipped by an explicit policy rule
	Decision  trust.Decision // what the policy said for the repository
	Index     *IndexChoice   // the image index ref named, which Desc is an entry of; nil when ref named Desc
}

// ErrReferenceMismatch: the trust rule requires a signature that names the repository the
// artifact comes from (require_docker_reference), and the trusted signatures name another.
var ErrReferenceMismatch = errors.New("signed for another repository")

// VerifyRef resolves ref in repo to a digest and checks its signature with the keys the
// policy names for the repository, before anything else of the artifact is read (and, if
// the rule requires it, that a trusted signature names this repository). Only then are
// the manifest bytes fetched (and checked against the digest), and the config they name,
// which must agree with the manifest (CheckConsistent). warn is told when the policy skips
// verification, every time.
//
// A ref naming an image index of pylayer artifacts (platform.go) is verified through the
// entry for the host's platform, or the one ForPlatform names: the index's signature when
// it has one, then the entry's as above; Verified.Index says which index it came from. An
// index without that platform is an error wrapping ErrNoPlatform that lists the platforms
// it has.
func VerifyRef(ctx context.Context, repo Repo, ref Ref, pol *trust.Policy, warn func(string), opts ...VerifyOption) (*Verified, error) {
	o := makeVerifyOptions(opts)
	dec, err := pol.For(repo.Name())
	if err != nil {
		return nil, err
	}
	d := v1.Descriptor{Digest: ref.Digest}
	if d.Digest == "" {
		if ref.Tag == "" {
			return nil, fmt.Errorf("%w: %s names no tag or digest", ErrInvalidRef, ref)
		}
		if d, err = repo.Resolve(ctx, ref.Tag); err != nil {
			return nil, err
		}
	}
	v := &Verified{Ref: ref, Desc: d, Decision: dec}
	// A digest's media type is not known before its bytes are read: a signature that does
	// not verify may be an unsigned index's, which the bytes tell.
	sig, sigErr := checkSignature(ctx, repo, d, dec)
	if sigErr != nil && (d.MediaType != "" && !oci.IsIndex(d.MediaType) || !errors.Is(sigErr, sign.ErrNoSignature)) {
		return nil, sigErr
	}
	raw, err := repo.Manifest(ctx, d)
	if err != nil {
		return nil, err
	}
	if oci.IsIndex(d.MediaType) || d.MediaType == "" && oci.IsIndex(mediaTypeOf(raw)) {
		if d, v.Index, err = chooseEntry(repo, d, raw, sig, sigErr, o); err != nil {
			return nil, err
		}
		v.Desc = d
		if sig, err = checkSignature(ctx, repo, d, dec); err != nil {
			return nil, fmt.Errorf("%s@%s, the %s entry of the image index %s: %w", repo.Name(), d.Digest, v.Index.Platform, v.Index.Desc.Digest, err)
		}
		if raw, err = repo.Manifest(ctx, d); err != nil {
			return nil, err
		}
	} else if sigErr != nil {
		return nil, sigErr
	}
	v.Signature = sig
	if dec.Unsigned {
		v.Unsigned = true
		if warn != nil {
			warn(fmt.Sprintf("WARNING: NOT verifying the signature of %s@%s: the trust policy accepts unsigned artifacts from %s (rule %q)", repo.Name(), d.Digest, repo.Name(), dec.Rule.Match))
		}
	}
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", repo.Name(), d.Digest, err)
	}
	if m.ArtifactType != oci.ArtifactTypeLayer && m.ArtifactType != oci.ArtifactTypePython {
		return nil, fmt.Errorf("%s@%s: %w (artifactType %q)", repo.Name(), d.Digest, ErrNotPylayer, m.ArtifactType)
	}
	if v.Index != nil {
		if err := checkEntryPlatform(m, v.Index); err != nil {
			return nil, fmt.Errorf("%s@%s: %w", repo.Name(), d.Digest, err)
		}
	}
	if v.Config, err = readConfig(ctx, repo, m); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", repo.Name(), d.Digest, err)
	}
	if err := CheckConsistent(m, v.Config); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", repo.Name(), d.Digest, err)
	}
	v.Desc.MediaType = v1.MediaTypeImageManifest
	v.Desc.Size = int64(len(raw))
	v.Desc.ArtifactType = m.ArtifactType
	v.Manifest = raw
	return v, nil
}

// mediaTypeOf reads the mediaType of a manifest or index, if any.
func mediaTypeOf(raw []byte) string {
	var m struct {
		MediaType string `json:"mediaType"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	return m.MediaType
}

// checkReference keeps the trusted signatures of res that the rule dec accepts for repo
// (all of them, unless it requires their docker-reference to name repo); none is an error
// wrapping ErrReferenceMismatch.
func checkReference(res *sign.Result, dec trust.Decision, repo string, d v1.Descriptor) error {
	var kept []sign.Signature
	for _, s := range res.Verified {
		if dec.AcceptsReference(s.DockerReference) {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		claims := make([]string, len(res.Verified))
		for i, s := range res.Verified {
			claims[i] = fmt.Sprintf("%q", s.DockerReference)
		}
		return fmt.Errorf("artifact %s@%s: %w: the trusted signatures name %s, and the trust rule %q requires one that names %s: pull it from the repository it was signed for, or sign it for this one",
			repo, d.Digest, ErrReferenceMismatch, strings.Join(claims, ", "), dec.Rule.Match, dec.Repository)
	}
	res.Verified = kept
	return nil
}

// readConfig fetches the config blob m names, within the limit of its kind.
func readConfig(ctx context.Context, repo Repo, m *v1.Manifest) ([]byte, error) {
	limit := int64(lock.MaxBytes)
	if m.ArtifactType == oci.ArtifactTypePython {
		limit = interp.MaxConfigBytes
	}
	if m.Config.Size > limit {
		return nil, fmt.Errorf("%w: its config is %d bytes, the limit is %d", oci.ErrInvalidManifest, m.Config.Size, limit)
	}
	rc, err := repo.Blob(ctx, m.Config)
	if err != nil {
		return nil, fmt.Errorf("fetching its config: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("fetching its config: %w", err)
	}
	return b, nil
}

// Pull verifies ref (see VerifyRef, which checks the manifest against its lock before
// anything is unpacked) and installs it into the host cache, fetching only the blobs the
// cache lacks, and records that repo admitted it (and, for an image index's entry for
// this host, that the index's digest stands for it: see Ensure). The installed artifact is then checked
// like every use (CheckUse). It returns the layer root.
func Pull(ctx context.Context, repo Repo, ref Ref, pol *trust.Policy, c *cache.Cache, progress func(cache.Event), warn func(string), opts ...VerifyOption) (string, *Verified, error) {
	v, err := VerifyRef(ctx, repo, ref, pol, warn, opts...)
	if err != nil {
		return "", nil, err
	}
	if _, err := install(ctx, c, repo, v, progress); err != nil {
		return "", nil, err
	}
	u, err := CheckUse(ctx, c, pol, repo.Name(), v.Desc.Digest)
	if err != nil {
		return "", nil, err
	}
	return u.Root, v, nil
}
