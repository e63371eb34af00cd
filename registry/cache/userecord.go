package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/oci/digest"
)

// maxUseRecordBytes bounds a use record: real ones are a few hundred bytes per wheel.
const maxUseRecordBytes = 1 << 20

// A use record is what the caller derived, once, from the manifest and config of a digest
// the cache holds (registry/local keeps there what a run checks of a layer: its kind, target,
// wheels and keys), so that later uses read it instead of re-reading and re-checking the
// manifest and config. It is a function of the digest's bytes alone, so it never goes
// stale; it is kept beside the digest's admission record, and removed with it. The cache
// does not read it: it keeps the bytes it is given, atomically replaced.
func (c *Cache) useRecordPath(hex string) string {
	return filepath.Join(c.root, "admissions", "sha256", hex+".use.json")
}

// UseRecord returns the use record kept for digest d, or false when there is none or it
// cannot be read: the caller then derives it again from Meta.
func (c *Cache) UseRecord(d digest.Digest) ([]byte, bool) {
	if checkDigest(d) != nil {
		return nil, false
	}
	b, err := readCapped(c.useRecordPath(d.Encoded()), maxUseRecordBytes)
	return b, err == nil
}

// SetUseRecord keeps b as the use record of digest d, which the cache must hold; it
// replaces the one kept before, atomically (a crash leaves the old record or the new one).
func (c *Cache) SetUseRecord(ctx context.Context, d digest.Digest, b []byte) error {
	if err := checkDigest(d); err != nil {
		return fmt.Errorf("keeping a use record: %w", err)
	}
	if len(b) > maxUseRecordBytes {
		return fmt.Errorf("keeping the use record of %s: %d bytes, the limit is %d", d, len(b), maxUseRecordBytes)
	}
	if _, ok := c.Layer(d); !ok {
		return fmt.Errorf("keeping the use record of %s: %w", d, ErrNotFound)
	}
	if err := c.replaceFile(ctx, c.useRecordPath(d.Encoded()), b); err != nil {
		return fmt.Errorf("keeping the use record of %s: %w", d, err)
	}
	return nil
}

// removeUseRecord removes the use record of hex; the caller holds its admit lock.
func (c *Cache) removeUseRecord(hex string) error {
	if err := os.Remove(c.useRecordPath(hex)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the use record of sha256:%s: %w", hex, err)
	}
	return nil
}
