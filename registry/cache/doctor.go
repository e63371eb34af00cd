package cache

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// DoctorReport says what Doctor checked, found and repaired.
type DoctorReport struct {
	Checked  int      // trees and layers checked
	Bad      []string // one line per damaged tree or layer
	Repaired []string // what repair did
}

// maxProblems bounds the problems listed per tree or layer.
const maxProblems = 5

// Doctor checks every tree against the file list written when it was unpacked
// (paths, modes, sizes, the content hash of every file) and every layer root against
// its trees (the same inodes, nothing missing, nothing extra, its metadata
// matching its digest). With repair it removes damaged trees and the layers
// that use them, and damaged layers, so that the next pull fetches them again;
// held layers are left alone (reported) until the sandboxes using them end.
func (c *Cache) Doctor(ctx context.Context, repair bool) (DoctorReport, error) {
	var rep DoctorReport
	gl, err := acquire(ctx, c.lockPath("gc", ""), lockMode{exclusive: repair, wait: true, create: true})
	if err != nil {
		return rep, fmt.Errorf("doctor: %w", err)
	}
	defer gl.release()
	if err := c.retireUnsynced(ctx, 0); err != nil {
		return rep, fmt.Errorf("doctor: %w", err)
	}

	infos, err := c.layers(ctx)
	if err != nil {
		return rep, fmt.Errorf("doctor: %w", err)
	}
	all, err := treeNames(filepath.Dir(c.treeDir("x")))
	if err != nil {
		return rep, fmt.Errorf("doctor: %w", err)
	}
	users := map[string][]string{} // tree -> the layers that use it
	treesOf := map[string][]string{}
	for _, li := range infos {
		for i := 0; li.manifest != nil && i < len(li.manifest.Layers); i++ {
			t := li.manifest.Layers[i].Digest.Encoded()
			treesOf[li.hex] = append(treesOf[li.hex], t)
			users[t] = append(users[t], li.hex)
		}
	}
	var trees []string
	for _, t := range all {
		if !c.danglingHome(t) {
			trees = append(trees, t)
			continue
		}
		// A home whose layer is gone. Left by an install that died before its layer's
		// rename, it is no tree, and no damage (the next install of the blob replaces
		// it, GC removes it). If a layer uses the blob all the same (its home was
		// removed by hand), that layer holds the files: repair makes it the home.
		user := ""
		if len(users[t]) > 0 {
			user = users[t][0]
		}
		switch {
		case user != "" && repair:
			if err := c.setHome(t, user); err != nil {
				return rep, fmt.Errorf("doctor: %w", err)
			}
			trees = append(trees, t)
			rep.Repaired = append(rep.Repaired, "tree sha256:"+t+": its home was gone, made layer sha256:"+user+", which holds its files, its home")
		case user != "":
			rep.Bad = append(rep.Bad, "tree sha256:"+t+": its home layer is gone, and layer sha256:"+user+" uses it: repair makes that layer its home")
		case repair:
			if err := c.removeTree(ctx, t); err != nil {
				return rep, fmt.Errorf("doctor: %w", err)
			}
			rep.Repaired = append(rep.Repaired, "tree sha256:"+t+": removed the home an interrupted install left")
		}
	}
	if repair {
		c.fixTops(trees, &rep)
	}
	recsOf := map[string][]record{}
	badTree := map[string]bool{}
	for _, t := range trees {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Checked++
		problems, recs := c.checkTree(t)
		if len(problems) > 0 {
			badTree[t] = true
			rep.Bad = append(rep.Bad, summarize("tree sha256:"+t, problems))
			continue
		}
		recsOf[t] = recs
	}
	var badLayers []string
	for _, li := range infos {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Checked++
		problems := c.checkLayer(li, recsOf, badTree)
		if len(problems) > 0 {
			badLayers = append(badLayers, li.hex)
			rep.Bad = append(rep.Bad, summarize("layer sha256:"+li.hex, problems))
		}
	}
	if !repair {
		return rep, nil
	}
	bad := map[string]bool{}
	for _, l := range badLayers {
		bad[l] = true
	}
	for _, l := range badLayers {
		ok, err := c.removeLayer(ctx, l, treesOf[l], func(t string) string {
			if badTree[t] {
				return ""
			}
			for _, u := range users[t] {
				if !bad[u] {
					return u // a sound layer that uses it
				}
			}
			return ""
		})
		if err != nil {
			return rep, fmt.Errorf("doctor: %w", err)
		}
		if ok {
			rep.Repaired = append(rep.Repaired, "removed layer sha256:"+l+" (pull it again)")
		} else {
			rep.Bad = append(rep.Bad, "layer sha256:"+l+": held by a running sandbox, not removed: repair again once it ends")
		}
	}
	for _, t := range trees {
		if badTree[t] {
			if err := c.removeTree(ctx, t); err != nil {
				return rep, fmt.Errorf("doctor: %w", err)
			}
			rep.Repaired = append(rep.Repaired, "removed tree sha256:"+t+" (the next pull fetches it again)")
		}
	}
	c.removeOrphanLists()
	return rep, nil
}

func summarize(what string, problems []string) string {
	s := what + ": " + strings.Join(problems[:min(len(problems), maxProblems)], "; ")
	if len(problems) > maxProblems {
		s += fmt.Sprintf("; and %d more", len(problems)-maxProblems)
	}
	return s
}

// checkTree verifies one tree against its file list, re-hashing every file: a
// directory of its own, or its paths in its home layer (homes.go), whose other
// paths are other blobs' (checkLayer looks at those).
func (c *Cache) checkTree(hex string) ([]string, []record) {
	recs, err := c.readFiles(hex)
	if err != nil {
		return []string{err.Error()}, nil
	}
	var problems []string
	dir, homed := c.treeDir(hex), false
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		layer, err := c.home(hex)
		if err != nil {
			return []string{err.Error()}, nil
		}
		dir, homed = c.layerDir(layer), true
	} else if err != nil || fi.Mode().Perm() != modeDir {
		problems = append(problems, "top directory is not read-only (0555)")
	}
	p, err := verifyTree(dir, recs, homed)
	if err != nil {
		return append(problems, err.Error()), nil
	}
	return append(problems, p...), recs
}

// checkLayer verifies a layer root: its metadata, and that every path is the
// directory or the very file (same inode) its tree provides, and nothing else.
func (c *Cache) checkLayer(li layerInfo, recsOf map[string][]record, badTree map[string]bool) []string {
	if li.problem != nil {
		return []string{li.problem.Error()}
	}
	root := c.layerDir(li.hex)
	var problems []string
	if fi, err := os.Lstat(root); err != nil || fi.Mode().Perm() != modeDir {
		problems = append(problems, "top directory is not read-only (0555)")
	}
	if p := c.checkMeta(root, li.manifest); p != "" {
		problems = append(problems, p)
	}
	type source struct {
		tree string
		rec  record
	}
	want := map[string]source{metaDir: {rec: record{Path: metaDir, Dir: true, Mode: modeDir}}}
	treesOK := true
	for _, l := range li.manifest.Layers {
		t := l.Digest.Encoded()
		if badTree[t] {
			problems, treesOK = append(problems, fmt.Sprintf("uses damaged tree %s (%s)", l.Digest, titleOf(l))), false
			continue
		}
		recs, ok := recsOf[t]
		if !ok {
			problems, treesOK = append(problems, fmt.Sprintf("tree %s (%s) is missing", l.Digest, titleOf(l))), false
			continue
		}
		for _, r := range recs {
			if _, dup := want[r.Path]; !dup || !r.Dir {
				want[r.Path] = source{tree: t, rec: r}
			}
		}
	}
	if !treesOK {
		return problems // comparing with trees that are damaged or gone says nothing more
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		if rel == metaDir+"/"+metaManifest || rel == metaDir+"/"+metaLock {
			return nil // checked by checkMeta
		}
		s, ok := want[rel]
		info, ierr := d.Info()
		switch {
		case ierr != nil:
			return ierr
		case !ok:
			problems = append(problems, rel+": not provided by any of its trees")
		case s.rec.Dir != info.IsDir() || !s.rec.Dir && (s.rec.Link == "") != info.Mode().IsRegular():
			problems = append(problems, fmt.Sprintf("%s: is a %s", rel, kindOf(info.Mode())))
		case s.rec.Dir && info.Mode().Perm() != modeDir:
			problems = append(problems, fmt.Sprintf("%s: mode %v, want %v", rel, info.Mode(), fs.FileMode(modeDir)))
		case !s.rec.Dir:
			src, err := os.Lstat(filepath.Join(c.treeDir(s.tree), filepath.FromSlash(rel)))
			if err != nil || !os.SameFile(src, info) {
				problems = append(problems, rel+": is not the file of tree sha256:"+s.tree)
			}
		}
		if info.IsDir() && (!ok || !s.rec.Dir) {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	for p := range want {
		if !seen[p] {
			problems = append(problems, p+": missing")
		}
	}
	return problems
}

// checkMeta checks .pylayer/: the manifest (already checked against the
// digest by readLayer) and the lock, which must be the manifest's config.
func (c *Cache) checkMeta(root string, m *v1.Manifest) string {
	for _, f := range []string{metaManifest, metaLock} {
		fi, err := os.Lstat(filepath.Join(root, metaDir, f))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != modeFile {
			return fmt.Sprintf("%s/%s is not a read-only regular file", metaDir, f)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, metaDir, metaLock))
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) != m.Config.Size || digest.FromBytes(b) != m.Config.Digest {
		return fmt.Sprintf("%s/%s is not the config blob %s", metaDir, metaLock, m.Config.Digest)
	}
	return ""
}

// fixTops makes the top directories of trees and layers read-only where a
// crash left them writable (see fixTop).
func (c *Cache) fixTops(trees []string, rep *DoctorReport) {
	for _, t := range trees {
		if fixTop(c.treeDir(t)) {
			rep.Repaired = append(rep.Repaired, "tree sha256:"+t+": made the top directory read-only")
		}
	}
	layers, _ := hexNames(filepath.Dir(c.layerDir("x")))
	for _, l := range layers {
		if fixTop(c.layerDir(l)) {
			rep.Repaired = append(rep.Repaired, "layer sha256:"+l+": made the top directory read-only")
		}
	}
}
