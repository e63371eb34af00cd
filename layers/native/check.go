package native

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Report is what Check found in one tree.
type Report struct {
	Platform string    // the platform whose allow-list was applied
	ELF      int       // ELF files read
	Missing  []Missing // by soname; empty when everything is found or allowed
	// Malformed lists files (tree-relative, slash-separated) that start like ELF but do
	// not parse: they cannot be loaded either, so they are reported rather than failing
	// the check.
	Malformed []string
}

// Missing is one soname that files of the tree need and that is neither in the tree
// where the loader would look nor on the platform's allow-list.
type Missing struct {
	Soname string
	Files  []string // tree-relative, slash-separated, sorted
}

// Sonames returns the missing sonames, sorted.
func (r *Report) Sonames() []string {
	out := make([]string, len(r.Missing))
	for i, m := range r.Missing {
		out[i] = m.Soname
	}
	return out
}

// Summary says in one sentence what is missing, e.g. "needs libblas.so.3 (by
// numpy/linalg/_umath_linalg.so), liblapack.so.3 (by ...), which are neither in the
// wheel nor on the manylinux_2_28 allow-list"; "" when nothing is.
func (r *Report) Summary() string {
	if r == nil || len(r.Missing) == 0 {
		return ""
	}
	parts := make([]string, len(r.Missing))
	for i, m := range r.Missing {
		by := m.Files[0]
		if n := len(m.Files) - 1; n > 0 {
			by = fmt.Sprintf("%s and %d more", by, n)
		}
		parts[i] = fmt.Sprintf("%s (by %s)", m.Soname, by)
	}
	which := "which is"
	if len(parts) > 1 {
		which = "which are"
	}
	return fmt.Sprintf("needs %s, %s neither in the wheel nor on the %s allow-list",
		strings.Join(parts, ", "), which, PolicyName(r.Platform))
}

// Check reads every ELF file below root (an installed wheel tree, or an unpacked
// wheel) and reports the DT_NEEDED sonames that are not allowed on platform (see
// Allowed) and not found where the loader would find them inside the tree: in the
// file's DT_RUNPATH (or DT_RPATH) directories, with $ORIGIN expanded to the file's own
// directory. Run path entries that leave the tree, are absolute, or use other tokens
// ($LIB, $PLATFORM) find nothing: in a sandbox only the layers are there. Symbolic
// links are not followed to ELF files, only to the libraries they need.
func Check(ctx context.Context, root, platform string) (*Report, error) {
	r := &Report{Platform: platform}
	users := map[string][]string{} // soname: files that need it
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		needed, runpath, err := Needed(p)
		switch {
		case errors.Is(err, ErrNotELF):
			return nil
		case errors.Is(err, ErrMalformed):
			r.Malformed = append(r.Malformed, rel)
			return nil
		case err != nil:
			return err
		}
		r.ELF++
		dirs := searchDirs(path.Dir(rel), runpath)
		for _, so := range needed {
			if Allowed(platform, so) || found(root, dirs, so) {
				continue
			}
			users[so] = append(users[so], rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking the native libraries of %s: %w", filepath.Base(root), err)
	}
	for so, files := range users {
		sort.Strings(files)
		r.Missing = append(r.Missing, Missing{Soname: so, Files: files})
	}
	sort.Slice(r.Missing, func(i, j int) bool { return r.Missing[i].Soname < r.Missing[j].Soname })
	sort.Strings(r.Malformed)
	return r, nil
}

// searchDirs expands a file's run path into tree-relative directories; origin is the
// file's own directory, tree-relative. Entries that cannot be inside the tree are
// dropped.
func searchDirs(origin string, runpath []string) []string {
	var dirs []string
	for _, e := range runpath {
		e = strings.ReplaceAll(e, "${ORIGIN}", "$ORIGIN")
		rest, ok := strings.CutPrefix(e, "$ORIGIN")
		if !ok || strings.Contains(rest, "$") || (rest != "" && rest[0] != '/') {
			continue
		}
		d := path.Clean(origin + rest)
		if d == ".." || strings.HasPrefix(d, "../") {
			continue
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// found reports whether soname is a regular file in one of the tree-relative dirs.
func found(root string, dirs []string, soname string) bool {
	if strings.Contains(soname, "/") {
		return false // a path: the loader opens it relative to the process, not the tree
	}
	for _, d := range dirs {
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(d), soname))
		if err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}
