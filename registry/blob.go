package registry

import (
	"io"

	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/cache"
)

// verifiedBlob is what Repo.Blob returns: the blob read through an oci.VerifyReader of d,
// which says so (cache.Verifier), so that the host cache does not hash it a second time.
type verifiedBlob struct {
	*oci.VerifyReader
	d v1.Descriptor
}

var _ cache.Verifier = verifiedBlob{}

func newVerifiedBlob(r io.Reader, d v1.Descriptor) verifiedBlob {
	return verifiedBlob{VerifyReader: oci.NewVerifyReader(r, d), d: d}
}

// VerifiesDescriptor is the descriptor the content is checked against.
func (b verifiedBlob) VerifiesDescriptor() v1.Descriptor { return b.d }
