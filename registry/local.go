package registry

import (
	"context"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/local"
	"github.com/pylayer/pylayer/registry/trust"
)

// What registry/local decides with no network, under the names registry's callers use: the
// front end (pylayer run on a warm cache) links registry/local without the registry
// protocol.
type (
	// Ref is local.Ref.
	Ref = local.Ref
	// Use is local.Use.
	Use = local.Use
)

// LayoutPrefix starts a reference to an OCI image layout directory (local.LayoutPrefix).
const LayoutPrefix = local.LayoutPrefix

var (
	// ErrInvalidRef is local.ErrInvalidRef.
	ErrInvalidRef = local.ErrInvalidRef
	// ErrInconsistent is local.ErrInconsistent.
	ErrInconsistent = local.ErrInconsistent
	// ErrNotPylayer is local.ErrNotPylayer.
	ErrNotPylayer = local.ErrNotPylayer
)

// ParseRef is local.ParseRef.
func ParseRef(s string) (Ref, error) { return local.ParseRef(s) }

// CheckConsistent is local.CheckConsistent.
func CheckConsistent(m *v1.Manifest, config []byte) error { return local.CheckConsistent(m, config) }

// CheckUse is local.CheckUse.
func CheckUse(ctx context.Context, c *cache.Cache, pol *trust.Policy, repo string, d digest.Digest) (*Use, error) {
	return local.CheckUse(ctx, c, pol, repo, d)
}
