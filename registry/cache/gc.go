package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Entry describes one installed layer.
type Entry struct {
	Digest   digest.Digest   // the manifest digest
	Root     string          // the layer root
	Bytes    int64           // apparent size: the file bytes of its trees, each tree once
	Trees    []digest.Digest // its blobs, in manifest order
	Refs     []string        // refs pointing at it, sorted
	Held     bool            // a running sandbox holds it
	Packages []string        // the wheel filenames of its blobs
	LastUsed time.Time       // last Install or Hold
	Problem  string          // why the layer could not be read, if it could not (see Doctor)
}

// GCReport says what GC removed and what it kept.
type GCReport struct {
	RemovedLayers, RemovedTrees []digest.Digest
	FreedBytes                  int64           // file bytes of the removed trees
	Kept                        []digest.Digest // layers still installed
}

// layerInfo is what GC and List know of an installed layer.
type layerInfo struct {
	hex      string
	manifest *v1.Manifest // nil if unreadable
	problem  error
	used     time.Time
}

// hexNames lists the names of dir that are 64 hex digits followed by one of suffixes
// (removed), each once, sorted; with no suffix, the directories named so. Other entries
// are reported by Doctor.
func hexNames(dir string, suffixes ...string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if len(suffixes) == 0 {
			if isHex64(e.Name()) && e.IsDir() {
				names = append(names, e.Name())
			}
			continue
		}
		for _, suffix := range suffixes {
			if n, ok := strings.CutSuffix(e.Name(), suffix); ok && isHex64(n) {
				names = append(names, n)
				break
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// readLayer reads and checks the manifest a layer root was installed from.
func (c *Cache) readLayer(hex string) (*v1.Manifest, error) {
	f, err := os.Open(filepath.Join(c.layerDir(hex), metaDir, metaManifest))
	if err != nil {
		return nil, fmt.Errorf("%w: layer sha256:%s: %v", ErrInvalidCache, hex, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<20+1))
	if err != nil {
		return nil, fmt.Errorf("%w: layer sha256:%s: %v", ErrInvalidCache, hex, err)
	}
	if digest.FromBytes(b).Encoded() != hex {
		return nil, fmt.Errorf("%w: layer sha256:%s: its %s/%s does not hash to the layer's digest", ErrInvalidCache, hex, metaDir, metaManifest)
	}
	m, err := oci.ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%w: layer sha256:%s: %v", ErrInvalidCache, hex, err)
	}
	return m, nil
}

func (c *Cache) layers(ctx context.Context) ([]layerInfo, error) {
	hexes, err := hexNames(filepath.Dir(c.layerDir("x")))
	if err != nil {
		return nil, err
	}
	infos := make([]layerInfo, 0, len(hexes))
	for _, hex := range hexes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		li := layerInfo{hex: hex}
		li.manifest, li.problem = c.readLayer(hex)
		if fi, err := os.Stat(c.lockPath("hold", hex)); err == nil {
			li.used = fi.ModTime()
		} else if fi, err := os.Stat(c.layerDir(hex)); err == nil {
			li.used = fi.ModTime()
		}
		infos = append(infos, li)
	}
	return infos, nil
}

// treeSizer memoizes tree sizes; an unreadable file list counts the bytes on disk.
type treeSizer struct {
	c     *Cache
	sizes map[string]int64
}

func (s *treeSizer) size(hex string) int64 {
	if n, ok := s.sizes[hex]; ok {
		return n
	}
	var n int64
	if recs, err := s.c.readFiles(hex); err == nil {
		n = treeBytes(recs)
	} else {
		filepath.WalkDir(s.c.treeDir(hex), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
	}
	s.sizes[hex] = n
	return n
}

// held reports whether a sandbox holds layer hex (see Hold).
func (c *Cache) held(ctx context.Context, hex string) bool {
	l, err := acquire(ctx, c.lockPath("hold", hex), lockMode{exclusive: true})
	if err != nil {
		return errors.Is(err, errBusy)
	}
	l.release()
	return false
}

// List returns the installed layers, sorted by digest.
func (c *Cache) List(ctx context.Context) ([]Entry, error) {
	refs, err := c.Refs(ctx)
	if err != nil {
		return nil, err
	}
	refsOf := map[digest.Digest][]string{}
	for name, d := range refs {
		refsOf[d] = append(refsOf[d], name)
	}
	infos, err := c.layers(ctx)
	if err != nil {
		return nil, err
	}
	sizer := &treeSizer{c: c, sizes: map[string]int64{}}
	entries := make([]Entry, 0, len(infos))
	for _, li := range infos {
		d := digest.NewDigestFromEncoded(digest.SHA256, li.hex)
		e := Entry{Digest: d, Root: c.layerDir(li.hex), Refs: refsOf[d], Held: c.held(ctx, li.hex), LastUsed: li.used}
		sort.Strings(e.Refs)
		if li.problem != nil {
			e.Problem = li.problem.Error()
		} else {
			for _, l := range li.manifest.Layers {
				e.Trees = append(e.Trees, l.Digest)
				e.Packages = append(e.Packages, titleOf(l))
				e.Bytes += sizer.size(l.Digest.Encoded())
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// GC removes layers that no ref points at, that are not in keep and that no
// sandbox holds, least recently used first, until the trees still in use
// total at most maxBytes (maxBytes < 0: every such layer); then every tree no
// remaining layer uses. A held layer is never removed. It waits for running
// installs to finish and keeps new ones waiting until it is done.
//
// Like containerd's garbage collector it works in two steps: it reads the
// cache's state (roots: refs, keep, held layers; references: layer -> trees;
// sizes and last uses) and computes what to delete with planGC, a pure
// function; then sweep deletes the plan's entries, each under its own lock.
func (c *Cache) GC(ctx context.Context, maxBytes int64, keep []digest.Digest) (GCReport, error) {
	protected := map[string]bool{}
	for _, d := range keep {
		if err := checkDigest(d); err != nil {
			return GCReport{}, fmt.Errorf("gc: keep: %w", err)
		}
		protected[d.Encoded()] = true
	}
	gl, err := acquire(ctx, c.lockPath("gc", ""), lockMode{exclusive: true, wait: true, create: true})
	if err != nil {
		return GCReport{}, fmt.Errorf("gc: %w", err)
	}
	defer gl.release()
	c.cleanTmp(ctx, 0) // nothing is installing: every work directory is stale
	if err := c.retireUnsynced(ctx, 0); err != nil {
		return GCReport{}, fmt.Errorf("gc: %w", err)
	}
	layers, sizes, err := c.gcState(ctx, protected)
	if err != nil {
		return GCReport{}, fmt.Errorf("gc: %w", err)
	}
	rep, err := c.sweep(ctx, planGC(layers, sizes, maxBytes), layers, sizes)
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	c.removeOrphanLists()
	c.removeOrphanAdmissions(ctx)
	return rep, nil
}

// gcLayer is what planGC knows of an installed layer.
type gcLayer struct {
	hex   string
	trees []string  // the blobs it uses (none when its manifest is unreadable)
	used  time.Time // its last Install or Hold
	root  bool      // a ref points at it, the caller keeps it, or a sandbox holds it
}

// gcPlan is what to delete: layers in that order, then trees.
type gcPlan struct {
	layers []string // least recently used first
	trees  []string // sorted; used by no layer that stays
}

// gcState reads the roots and references planGC needs: every installed layer
// (a root when protected, ref'd or held) and the file bytes of every tree.
func (c *Cache) gcState(ctx context.Context, protected map[string]bool) ([]gcLayer, map[string]int64, error) {
	refs, err := c.Refs(ctx)
	if err != nil {
		return nil, nil, err
	}
	infos, err := c.layers(ctx)
	if err != nil {
		return nil, nil, err
	}
	trees, err := treeNames(filepath.Dir(c.treeDir("x")))
	if err != nil {
		return nil, nil, err
	}
	sizer := &treeSizer{c: c, sizes: map[string]int64{}}
	sizes := make(map[string]int64, len(trees))
	for _, t := range trees {
		sizes[t] = sizer.size(t)
	}
	roots := maps.Clone(protected)
	for _, d := range refs {
		roots[d.Encoded()] = true
	}
	layers := make([]gcLayer, 0, len(infos))
	for _, li := range infos {
		l := gcLayer{hex: li.hex, used: li.used, root: roots[li.hex] || c.held(ctx, li.hex)}
		if li.manifest != nil {
			for _, b := range li.manifest.Layers {
				l.trees = append(l.trees, b.Digest.Encoded())
			}
		}
		layers = append(layers, l)
	}
	return layers, sizes, nil
}

// planGC decides, with no I/O, what GC deletes: layers that are not roots, least
// recently used first (ties by digest), until the bytes of the trees that the
// remaining layers use are at most maxBytes (maxBytes < 0: every such layer); and
// every tree in sizes (the trees on disk, with their bytes) that no remaining
// layer uses, whatever the budget.
func planGC(layers []gcLayer, sizes map[string]int64, maxBytes int64) gcPlan {
	users := map[string]int{}
	for _, l := range layers {
		for _, t := range l.trees {
			if _, onDisk := sizes[t]; onDisk {
				users[t]++
			}
		}
	}
	var total int64
	for t := range users {
		total += sizes[t]
	}
	order := slices.Clone(layers)
	slices.SortStableFunc(order, func(a, b gcLayer) int {
		if c := a.used.Compare(b.used); c != 0 {
			return c
		}
		return strings.Compare(a.hex, b.hex)
	})
	var plan gcPlan
	for _, l := range order {
		if l.root || maxBytes >= 0 && total <= maxBytes {
			continue
		}
		plan.layers = append(plan.layers, l.hex)
		for _, t := range l.trees {
			if _, onDisk := sizes[t]; !onDisk {
				continue
			}
			if users[t]--; users[t] == 0 {
				total -= sizes[t]
			}
		}
	}
	for t := range sizes {
		if users[t] == 0 {
			plan.trees = append(plan.trees, t)
		}
	}
	slices.Sort(plan.trees)
	return plan
}

// sweep deletes what plan names. A layer a sandbox took hold of since the plan was
// made is skipped (removeLayer re-checks under the layer's locks), and so are the
// trees it uses. A layer's admission records go with it.
func (c *Cache) sweep(ctx context.Context, plan gcPlan, layers []gcLayer, sizes map[string]int64) (GCReport, error) {
	var rep GCReport
	treesOf := make(map[string][]string, len(layers))
	for _, l := range layers {
		treesOf[l.hex] = l.trees
	}
	removed, spared := map[string]bool{}, map[string]bool{}
	users := map[string][]string{} // tree -> the layers that use it
	for _, l := range layers {
		for _, t := range l.trees {
			users[t] = append(users[t], l.hex)
		}
	}
	for _, hex := range plan.layers {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		ok, err := c.removeLayer(ctx, hex, treesOf[hex], func(t string) string {
			for _, u := range users[t] {
				if u != hex && !removed[u] {
					return u
				}
			}
			return ""
		})
		if err != nil {
			return rep, err
		}
		if !ok { // held since the plan was made
			for _, t := range treesOf[hex] {
				spared[t] = true
			}
			continue
		}
		removed[hex] = true
		rep.RemovedLayers = append(rep.RemovedLayers, digest.NewDigestFromEncoded(digest.SHA256, hex))
	}
	for _, l := range layers {
		if !removed[l.hex] {
			rep.Kept = append(rep.Kept, digest.NewDigestFromEncoded(digest.SHA256, l.hex))
		}
	}
	slices.Sort(rep.Kept)
	for _, t := range plan.trees {
		if spared[t] {
			continue
		}
		if err := c.removeTree(ctx, t); err != nil {
			return rep, err
		}
		rep.RemovedTrees = append(rep.RemovedTrees, digest.NewDigestFromEncoded(digest.SHA256, t))
		rep.FreedBytes += sizes[t]
	}
	return rep, nil
}

// removeLayer removes layer hex unless it is held (ok false). It takes the
// layer's install lock and its hold lock exclusively, moves the home of every tree
// it is the home of to the layer newHome names, or removes such a tree where there
// is none (rehome; trees are the blobs it uses, nil if unknown), renames the root
// into tmp/ (so it vanishes at once) and deletes it there.
func (c *Cache) removeLayer(ctx context.Context, hex string, trees []string, newHome func(tree string) string) (ok bool, err error) {
	ll, err := acquire(ctx, c.lockPath("layer", hex), lockMode{exclusive: true, create: true})
	if errors.Is(err, errBusy) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer ll.release()
	hl, err := acquire(ctx, c.lockPath("hold", hex), lockMode{exclusive: true, create: true})
	if errors.Is(err, errBusy) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer hl.release()
	if err := c.rehome(ctx, hex, trees, newHome); err != nil {
		return false, fmt.Errorf("removing layer sha256:%s: %w", hex, err)
	}
	if err := c.moveAway(ctx, c.layerDir(hex)); err != nil {
		return false, fmt.Errorf("removing layer sha256:%s: %w", hex, err)
	}
	if err := c.removeAdmissions(ctx, hex); err != nil {
		return false, err
	}
	hl.removeAndRelease()
	ll.removeAndRelease()
	return true, nil
}

// removeTree removes the tree of blob hex and its file list, under its lock.
func (c *Cache) removeTree(ctx context.Context, hex string) error {
	tl, err := acquire(ctx, c.lockPath("tree", hex), lockMode{exclusive: true, wait: true, create: true})
	if err != nil {
		return err
	}
	defer tl.release()
	if err := c.moveAway(ctx, c.treeDir(hex)); err != nil {
		return fmt.Errorf("removing tree sha256:%s: %w", hex, err)
	}
	// The tree goes first: a file list without its tree is harmless, a tree
	// without its list needs a repair.
	if err := os.Remove(c.treeFiles(hex)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the file list of tree sha256:%s: %w", hex, err)
	}
	tl.removeAndRelease()
	return nil
}

// removeOrphanLists removes file lists whose tree is gone (a crash between
// the two renames of an install, or of a removal).
func (c *Cache) removeOrphanLists() {
	lists, _ := hexNames(filepath.Dir(c.treeDir("x")), filesSuffix)
	for _, t := range lists {
		if _, err := os.Lstat(c.treeDir(t)); errors.Is(err, fs.ErrNotExist) {
			os.Remove(c.treeFiles(t))
		}
	}
}

// moveAway renames dir into tmp/gc-* (one atomic step: it is gone from view)
// and then deletes it. The directory is made writable first: moving a
// directory to another parent needs write access to it.
func (c *Cache) moveAway(ctx context.Context, dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 { // a tree's home: the link alone goes
		if err := os.Remove(dir); err != nil {
			return err
		}
		return syncDir(ctx, filepath.Dir(dir))
	}
	trash, err := os.MkdirTemp(c.tmpDir(), "gc-*")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		forceRemoveAll(trash)
		return err
	}
	if err := os.Rename(dir, filepath.Join(trash, "x")); err != nil {
		os.Chmod(dir, modeDir)
		forceRemoveAll(trash)
		return err
	}
	syncDir(ctx, filepath.Dir(dir))
	return forceRemoveAll(trash)
}
