package cache

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pylayer/pylayer/oci/digest"
)

// A tree's home. An install renames each tree it unpacks into its layer whole
// (layerBuild.merge), so that the layer's files are the tree's files, written once,
// with no second name. trees/sha256/<blob> is then a symlink to that layer,
// homeTarget(layer), and the blob's files are at their paths in it, beside other
// blobs' files; the file list (<blob>.files) says which. A later layer that uses the
// blob hardlinks them from there, as it would from a tree of its own. A tree that is
// a directory (unpacked by an install that had to commit it alone, or by an older
// pylayer) is its own home.
//
// The home is placed after the file list and before the layer is renamed into view,
// so that a home never names a layer that is not complete: an install that dies in
// between leaves a home whose layer is missing, which hasTree takes for no tree, the
// next install of the blob replaces, and GC removes. A layer is never removed while
// it is the home of a tree another layer uses: removeLayer moves the home to such a
// layer first (rehome).

// homeTarget is the symlink trees/sha256/<blob> holds for a tree whose home is layer.
func homeTarget(layer string) string { return "../../layers/sha256/" + layer }

// home returns the layer (manifest digest, hex) whose root holds the files of tree
// hex, which is a symlink; a link that is not homeTarget of a digest is damage.
func (c *Cache) home(hex string) (string, error) {
	target, err := os.Readlink(c.treeDir(hex))
	if err != nil {
		return "", err
	}
	layer, ok := strings.CutPrefix(target, homeTarget(""))
	if !ok || !isHex64(layer) {
		return "", fmt.Errorf("%w: tree %s links to %q, not to a layer: run `pylayer doctor --repair`", ErrInvalidCache, hex, target)
	}
	return layer, nil
}

// setHome makes layer the home of tree hex, replacing what trees/sha256/<hex> was
// (a home, never a directory) with one rename.
func (c *Cache) setHome(hex, layer string) error {
	tmp := filepath.Join(c.tmpDir(), "tree-"+hex+"-home-"+rand.Text()) // cleanTmp: the tree's work
	if err := os.Symlink(homeTarget(layer), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.treeDir(hex)); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// placeHomes puts the file lists of the trees an install merged into layer in
// place, then makes layer their home (see above); on error it removes the homes it
// made. Their locks stay held: finish frees them once the layer is in place.
func (c *Cache) placeHomes(ctx context.Context, pending []*pendingTree, layer string) error {
	for _, p := range pending {
		if err := os.Rename(filepath.Join(p.work, "files"), c.treeFiles(p.d.Digest.Encoded())); err != nil {
			return fmt.Errorf("blob %s (%s): moving the file list into place: %w", p.d.Digest, titleOf(p.d), err)
		}
	}
	if len(pending) > 0 {
		testHook("listed")
	}
	for k, p := range pending {
		if err := c.setHome(p.d.Digest.Encoded(), layer); err != nil {
			for _, q := range pending[:k] {
				os.Remove(c.treeDir(q.d.Digest.Encoded()))
			}
			return fmt.Errorf("blob %s (%s): making its layer its home: %w", p.d.Digest, titleOf(p.d), err)
		}
	}
	return nil
}

// rehome is what removeLayer does before layer goes: every tree whose home it is
// moves to the layer newHome names (another installed layer that uses the blob and
// stays), or, where there is none, is removed with its file list. trees are the
// blobs layer uses, or nil when its manifest cannot be read (every tree is looked at).
func (c *Cache) rehome(ctx context.Context, layer string, trees []string, newHome func(tree string) string) error {
	if trees == nil {
		all, err := treeNames(filepath.Dir(c.treeDir("x")))
		if err != nil {
			return err
		}
		trees = all
	}
	moved := false
	for _, t := range trees {
		if fi, err := os.Lstat(c.treeDir(t)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue // gone, or its own home
		}
		if h, err := c.home(t); err == nil && h != layer {
			continue
		}
		if nh := newHome(t); nh != "" && nh != layer {
			tl, err := acquire(ctx, c.lockPath("tree", t), lockMode{exclusive: true, wait: true, create: true})
			if err == nil {
				err = c.setHome(t, nh) // under the tree's lock: cleanTmp leaves its link alone
				tl.release()
			}
			if err != nil {
				return fmt.Errorf("moving the home of tree sha256:%s to layer sha256:%s: %w", t, nh, err)
			}
			moved = true
			continue
		}
		if err := c.removeTree(ctx, t); err != nil {
			return err
		}
	}
	if !moved {
		return nil
	}
	return syncDir(ctx, filepath.Dir(c.treeDir("x"))) // before the layer goes: never a home in a removed layer
}

// treeNames lists the trees in dir (trees/sha256): directories and homes.
func treeNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if isHex64(e.Name()) && (e.IsDir() || e.Type()&os.ModeSymlink != 0) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// danglingHome reports whether tree hex is a home whose layer is not installed: the
// leftover of an install that died before its layer's rename (see above).
func (c *Cache) danglingHome(hex string) bool {
	fi, err := os.Lstat(c.treeDir(hex))
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return false
	}
	_, installed, err := c.homeInstalled(hex)
	return err == nil && !installed // a link to no layer at all is damage, not a leftover
}

// homeInstalled returns the layer that tree hex, a home, links to, and whether that
// layer is installed.
func (c *Cache) homeInstalled(hex string) (string, bool, error) {
	layer, err := c.home(hex)
	if err != nil {
		return "", false, err
	}
	_, ok := c.Layer(digest.NewDigestFromEncoded(digest.SHA256, layer))
	return layer, ok, nil
}
