package interp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
)

// interpreterPath is the interpreter of a prefix, relative to it.
const interpreterPath = "bin/python3"

// Probe digests the prefix (Config.Tree: oci.TreeDigest, symlinks inside the tree
// allowed), then runs its interpreter (prefix/bin/python3) once with
// layers/target.Probe and returns its Config, Source SourcePrefix.
//
// The probe runs in place with -I -S -B (no site, no bytecode written): the prefix is
// never written, so probing it, or building with it, leaves its digest as it was.
// Symlinks in the prefix must pass oci.CheckSymlink.
func Probe(ctx context.Context, prefix string) (Config, error) {
	prefix, err := filepath.Abs(prefix)
	if err != nil {
		return Config{}, err
	}
	if err := checkPrefix(prefix); err != nil {
		return Config{}, err
	}
	tree, err := oci.TreeDigest(ctx, prefix, oci.TarTreeOptions{AllowSymlinks: true})
	if err != nil {
		return Config{}, fmt.Errorf("digesting the prefix %s: %w", prefix, err)
	}
	t, err := target.Probe(ctx, filepath.Join(prefix, interpreterPath))
	if err != nil {
		return Config{}, fmt.Errorf("probing the interpreter of %s: %w", prefix, err)
	}
	c := configFromTarget(t, SourcePrefix)
	c.Tree = tree.String()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("probing %s: %w", prefix, err)
	}
	return c, nil
}

// checkPrefix makes sure prefix is a directory with bin/python3.
func checkPrefix(prefix string) error {
	fi, err := os.Stat(prefix)
	if err != nil {
		return fmt.Errorf("python prefix: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("python prefix %s is not a directory", prefix)
	}
	if _, err := os.Lstat(filepath.Join(prefix, interpreterPath)); err != nil {
		return fmt.Errorf("%s has no %s: not a CPython prefix (python-build-standalone's install_only layout, or bin/ and lib/python3.X/)", prefix, interpreterPath)
	}
	return nil
}
