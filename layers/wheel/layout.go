package wheel

import (
	"archive/zip"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Files that Install writes itself into .dist-info; the wheel's own copies (and
// direct_url.json, which would misstate where the files came from, and RECORD's
// signatures, which sign a RECORD that is rewritten) are verified but not installed.
var generatedDistInfo = map[string]bool{
	"RECORD": true, "INSTALLER": true, "REQUESTED": true, "direct_url.json": true,
	"RECORD.jws": true, "RECORD.p7s": true,
}

// layout decides where every member goes, adds the generated scripts and refuses any
// two files that would land on the same path (ignoring case) or a file where a
// directory is needed.
func (p *plan) layout(files []*zip.File, eps *entryPoints, o InstallOptions) error {
	dataDir := strings.TrimSuffix(p.distInfo, ".dist-info") + ".data"
	for _, zf := range files {
		top, sub, _ := strings.Cut(zf.Name, "/")
		e := &entry{zf: zf, row: p.rows[zf.Name], exec: isExecutable(zf)}
		switch {
		case top == p.distInfo && generatedDistInfo[sub]:
			continue
		case top == dataDir:
			var err error
			if e.dest, e.kind, err = p.dataDest(zf.Name, sub); err != nil {
				return err
			}
			if e.kind == kindScript && eps.isEntryPointWrapper(path.Base(e.dest)) {
				continue // pip replaces setuptools' wrappers by its own scripts
			}
		case strings.HasSuffix(top, ".data") && sub != "":
			return fmt.Errorf("%w: %s: .data directory %q is not %q", ErrBadWheel, zf.Name, top, dataDir)
		default:
			e.dest, e.kind = path.Join("site-packages", zf.Name), kindLib
		}
		if e.kind == kindLib && strings.HasSuffix(e.dest, ".py") {
			p.pySrcs = append(p.pySrcs, strings.TrimPrefix(e.dest, "site-packages/"))
		}
		p.entries = append(p.entries, e)
	}
	sort.Strings(p.pySrcs)
	p.scripts = eps.scripts(o.PythonVersion)
	if n := len(files) + len(p.scripts); n > o.MaxFiles {
		return fmt.Errorf("%w: %d files with entry point scripts, limit %d", ErrTooLarge, n, o.MaxFiles)
	}
	dests := map[string]string{} // folded destination -> what puts a file there
	add := func(dest, from string) error {
		key := strings.ToLower(dest)
		if other, ok := dests[key]; ok {
			return fmt.Errorf("%w: %s and %s both install to %s (ignoring case)", ErrUnsafePath, other, from, dest)
		}
		dests[key] = from
		return nil
	}
	for _, e := range p.entries {
		if err := add(e.dest, e.zf.Name); err != nil {
			return err
		}
	}
	for _, s := range p.scripts {
		if err := add("bin/"+s.name, "entry point "+s.name); err != nil {
			return err
		}
	}
	for _, g := range []string{"RECORD", "INSTALLER", "REQUESTED"} {
		if err := add(path.Join("site-packages", p.distInfo, g), "pylayer"); err != nil {
			return err
		}
	}
	for dest, from := range dests {
		for d := path.Dir(dest); d != "."; d = path.Dir(d) {
			if other, ok := dests[d]; ok {
				return fmt.Errorf("%w: %s installs a file at %s, where %s needs a directory", ErrUnsafePath, other, d, from)
			}
		}
	}
	return nil
}
