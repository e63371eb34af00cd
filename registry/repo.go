package registry

import (
	"context"
	"errors"
	"io"

	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Repo is one repository of artifacts: a repository in a registry, or an OCI image layout
// directory. Everything read through it is verified against the digest that named it.
type Repo interface {
	// Name is the repository for humans and signatures: "127.0.0.1:5000/team/pylayer" or
	// "oci:/abs/dir". Never carries credentials.
	Name() string
	// Resolve turns a tag into the descriptor of the manifest it points at (ErrNotFound).
	Resolve(ctx context.Context, tag string) (v1.Descriptor, error)
	// Manifest returns a manifest's raw bytes, verified against d (digest, and size when set).
	Manifest(ctx context.Context, d v1.Descriptor) ([]byte, error)
	// Blob opens a blob; the reader fails at EOF (ErrDigestMismatch) if the bytes do not
	// match d, and never yields more than d.Size bytes.
	Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error)
	// HasBlob says whether the repository already has the blob (HEAD, not GET).
	HasBlob(ctx context.Context, d v1.Descriptor) (bool, error)
	// PushBlob uploads a blob unless the repository has it already; open may be called
	// more than once (retries). It reports whether bytes were uploaded.
	PushBlob(ctx context.Context, d v1.Descriptor, open func() (io.ReadCloser, error)) (uploaded bool, err error)
	// PushManifest stores raw manifest bytes (of the given media type) under tag ("" for
	// by-digest only) and returns its descriptor.
	PushManifest(ctx context.Context, raw []byte, mediaType, tag string) (v1.Descriptor, error)
}

// Sentinels for errors.Is. ErrNotFound, ErrDigestMismatch and ErrSizeMismatch are oci's,
// so a caller that only knows the narrower interfaces of oci/sign or the cache can still
// tell them apart. ErrSizeMismatch also matches ErrDigestMismatch.
var (
	ErrNotFound       = oci.ErrNotFound
	ErrDigestMismatch = oci.ErrDigestMismatch
	ErrSizeMismatch   = oci.ErrSizeMismatch
	ErrUnauthorized   = errors.New("unauthorized")
	// ErrUntrustedCert: the registry's TLS certificate is signed by no CA this host
	// trusts (pass --ca-file).
	ErrUntrustedCert = errors.New("untrusted TLS certificate")
)
