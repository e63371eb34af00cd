//go:build !unix

package oci

import (
	"context"
	"errors"
)

func (l *Layout) withIndexLock(ctx context.Context, fn func() error) error {
	return errors.New("updating an OCI layout needs file locks, which pylayer only implements on unix")
}
