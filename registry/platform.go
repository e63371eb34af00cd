package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/trust"
)

// A tag or digest may name an image index of pylayer artifacts, one per platform
// (oci.PlatformIndex): VerifyRef then uses the entry for the host's platform, or for the
// one ForPlatform names. Trust applies to what is used: the entry's signature is checked
// as any artifact's, and the index's too when it is signed (an unsigned index only
// points at artifacts that must be signed themselves). The entry's manifest must be for
// the platform its index entry claims, so an index cannot pass one platform's artifact
// off as another's.

// ErrNoPlatform: an image index has no entry for the platform asked for.
var ErrNoPlatform = oci.ErrNoPlatform

// VerifyOption changes what VerifyRef and Pull choose from an image index.
type VerifyOption func(*verifyOptions)

type verifyOptions struct {
	platform oci.Platform
	host     bool // platform is the host's
}

// ForPlatform makes VerifyRef take p's entry from an image index instead of the host's.
func ForPlatform(p oci.Platform) VerifyOption {
	return func(o *verifyOptions) { o.platform, o.host = p, p == oci.HostPlatform() }
}

func makeVerifyOptions(opts []VerifyOption) verifyOptions {
	o := verifyOptions{platform: oci.HostPlatform(), host: true}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// IndexChoice is the image index a Verified artifact was chosen from.
type IndexChoice struct {
	Desc      v1.Descriptor // the index, by digest
	Platform  oci.Platform  // the entry's platform
	Host      bool          // Platform is this host's
	Signature *sign.Result  // nil: the index is unsigned, or the policy accepts unsigned artifacts
}

// checkSignature verifies the signature of d under the decision dec (nothing when it
// accepts unsigned artifacts).
func checkSignature(ctx context.Context, repo Repo, d v1.Descriptor, dec trust.Decision) (*sign.Result, error) {
	if dec.Unsigned {
		return nil, nil
	}
	keys, err := sign.LoadVerifier(ctx, dec.Keys...)
	if err != nil {
		return nil, err
	}
	res, err := sign.Verify(ctx, repo, d, keys)
	if err != nil {
		return nil, err
	}
	if err := checkReference(res, dec, repo.Name(), d); err != nil {
		return nil, err
	}
	return res, nil
}

// chooseEntry reads the image index raw (digest idx), whose signature check gave sigErr,
// and returns the entry for o's platform. A signed index must verify; an unsigned one is
// accepted (sign.ErrNoSignature).
func chooseEntry(repo Repo, idx v1.Descriptor, raw []byte, sig *sign.Result, sigErr error, o verifyOptions) (v1.Descriptor, *IndexChoice, error) {
	if sigErr != nil && !errors.Is(sigErr, sign.ErrNoSignature) {
		return v1.Descriptor{}, nil, fmt.Errorf("the image index %s@%s: %w", repo.Name(), idx.Digest, sigErr)
	}
	x, err := oci.ParseIndex(raw)
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("%s@%s: %w", repo.Name(), idx.Digest, err)
	}
	d, err := oci.SelectPlatform(x, o.platform)
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("%s@%s: %w", repo.Name(), idx.Digest, err)
	}
	idx.MediaType = v1.MediaTypeImageIndex
	idx.Size = int64(len(raw))
	ch := &IndexChoice{Desc: idx, Platform: o.platform, Host: o.host, Signature: sig}
	if p, ok := oci.EntryPlatform(d); ok {
		ch.Platform = p
	}
	return v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d.Digest, Size: d.Size}, ch, nil
}

// checkEntryPlatform refuses an entry whose manifest m is for another platform than the
// one its index entry claims.
func checkEntryPlatform(m *v1.Manifest, ch *IndexChoice) error {
	tag := m.Annotations[oci.AnnotationPlatform]
	p, err := oci.PlatformOf(tag)
	if err != nil {
		return fmt.Errorf("%w: its index entry is for %s, and the manifest: %v", ErrInconsistent, ch.Platform, err)
	}
	if p.OS != ch.Platform.OS || p.Architecture != ch.Platform.Architecture || p.Libc != ch.Platform.Libc {
		return fmt.Errorf("%w: its index entry is for %s, but it is an artifact for %s (%s)", ErrInconsistent, ch.Platform, p, tag)
	}
	return nil
}
