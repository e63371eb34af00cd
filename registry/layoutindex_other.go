//go:build !unix

package registry

import (
	"context"
	"errors"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

func setTag(ctx context.Context, dir string, entry v1.Descriptor, tag string) error {
	return errors.New("tagging in an OCI layout needs file locks, which pylayer only implements on unix")
}
