package wheel

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pylayer/pylayer/internal/fsx"
)

// fixedTime is the modification time of everything Install writes.
var fixedTime = time.Unix(0, 0)

// Install installs the wheel at wheelPath into a new directory dest (which must not
// exist; its parent must) with the layout described in the package documentation.
//
// The archive is verified completely before anything is written: file name, member
// paths and modes, RECORD (every member with matching size and digest, every row a
// member), limits, .dist-info name, METADATA, WHEEL and entry points. The tree is then
// built in a temporary sibling of dest, fsynced (unless NoSync) and renamed to dest; on
// any error the temporary directory is removed and dest does not exist. File modes are
// 0644 or 0755, directories 0755, and every modification time is the Unix epoch, so the
// tree depends only on the wheel and the options.
func Install(ctx context.Context, wheelPath, dest string, opts InstallOptions) (*Installed, error) {
	inst, err := install(ctx, wheelPath, dest, opts)
	if err != nil {
		return nil, fmt.Errorf("installing %s: %w", filepath.Base(wheelPath), err)
	}
	return inst, nil
}

func install(ctx context.Context, wheelPath, dest string, opts InstallOptions) (*Installed, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fn, err := ParseFilename(filepath.Base(wheelPath))
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dest); err == nil {
		return nil, fmt.Errorf("destination %s: %w", dest, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("destination: %w", err)
	}
	f, err := os.Open(wheelPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadWheel, wheelPath)
	}
	zr, err := zip.NewReader(f, st.Size())
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // insecure names are refused by scan
		return nil, fmt.Errorf("%w: not a zip archive: %v", ErrBadWheel, err)
	}
	p, err := scan(ctx, zr, f, fn, o)
	if err != nil {
		return nil, err
	}
	parent := filepath.Dir(dest)
	tmp, err := os.MkdirTemp(parent, filepath.Base(dest)+".tmp-")
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	inst, err := p.write(ctx, tmp, o)
	if err != nil {
		return nil, err
	}
	if o.NoSync {
		if err := os.Rename(tmp, dest); err != nil {
			return nil, err
		}
		done = true
		return inst, nil
	}
	// One syncfs for the whole tree instead of an fsync per file: a wheel has thousands of
	// files, and per-file fsync made installs several times slower than pip's.
	if err := fsx.SyncFS(ctx, tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return nil, err
	}
	done = true
	if err := fsx.SyncDir(ctx, parent); err != nil {
		os.RemoveAll(dest) // not durable: do not leave it for the caller to trust
		return nil, err
	}
	return inst, nil
}

// write builds the tree in tmp, which exists and is empty.
//
// Anything the wheel has in __pycache__ directories (where the interpreter writes) goes
// first, then the .py sources, each few of them sent to be compiled as soon as they are
// written, then the rest, often a wheel's biggest files (extension modules), while the
// .pyc compile. Nothing else the interpreter touches is written meanwhile, so the tree
// does not depend on which finishes first.
func (p *plan) write(ctx context.Context, tmp string, o InstallOptions) (*Installed, error) {
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	known := map[string]written{} // files written here, by tree path
	made := dirsMade{".": true}
	extract := func(e *entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if e.exec || e.kind == kindScript {
			mode = 0o755
		}
		w, err := p.extract(ctx, root, made, e, mode, o)
		if err != nil {
			return err
		}
		known[e.dest] = w
		return nil
	}
	pycache, srcs, rest := p.compileOrder()
	for _, e := range pycache {
		if err := extract(e); err != nil {
			return nil, err
		}
	}
	var job *compileJob
	if o.Interpreter != "" && len(srcs) > 0 {
		site, err := filepath.Abs(filepath.Join(tmp, "site-packages")) // the interpreter runs elsewhere
		if err != nil {
			return nil, err
		}
		c := o.Compiler
		if c == nil {
			if c, err = NewCompiler(ctx, o.Interpreter, 1); err != nil {
				return nil, err
			}
			defer c.Close()
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var size int64 // the tree's, roughly: what is left to do with it after compiling
		for _, e := range p.entries {
			size += e.row.size
		}
		job = c.begin(cctx, site, o.SitePackagesDir, size)
		defer func() {
			if job != nil { // failed: the interpreter is done with the tree before it goes
				cancel()
				job.wait()
			}
		}()
	}
	var batch []string
	for _, e := range srcs {
		if err := extract(e); err != nil {
			return nil, err
		}
		if job != nil {
			if batch = append(batch, strings.TrimPrefix(e.dest, "site-packages/")); len(batch) == chunkFiles {
				job.add(batch)
				batch = batch[:0]
			}
		}
	}
	if job != nil {
		job.add(batch)
	}
	if err := p.writeRest(root, known, rest, extract, o); err != nil {
		return nil, err
	}
	var skipped []string
	if job != nil {
		pycs, skip, err := job.wait()
		job = nil
		if err != nil {
			return nil, err
		}
		for _, pyc := range pycs {
			known[pyc] = written{mode: 0o644} // the interpreter wrote it: hashed by finish
		}
		skipped = skip
	}
	di := path.Join("site-packages", p.distInfo)
	inst := &Installed{Name: p.meta.Name, Version: p.meta.Version, DistInfo: p.distInfo, PycSkipped: skipped}
	if err := finish(ctx, root, di+"/RECORD", known, inst); err != nil {
		return nil, err
	}
	return inst, nil
}

// compileOrder splits the entries into the .py sources (in p.pySrcs order), the others
// in a __pycache__ directory, and the rest.
func (p *plan) compileOrder() (pycache, srcs, rest []*entry) {
	bySrc := map[string]*entry{}
	for _, s := range p.pySrcs {
		bySrc[s] = nil
	}
	for _, e := range p.entries {
		rel := strings.TrimPrefix(e.dest, "site-packages/")
		if _, ok := bySrc[rel]; ok && rel != e.dest {
			bySrc[rel] = e
			continue
		}
		if slices.Contains(strings.Split(e.dest, "/"), "__pycache__") {
			pycache = append(pycache, e)
		} else {
			rest = append(rest, e)
		}
	}
	for _, s := range p.pySrcs {
		if e := bySrc[s]; e != nil {
			srcs = append(srcs, e)
		}
	}
	return pycache, srcs, rest
}

// writeRest writes the entries that may be written while the .pyc compile, then the
// entry point scripts and the .dist-info files Install generates.
func (p *plan) writeRest(root *os.Root, known map[string]written, rest []*entry, extract func(*entry) error, o InstallOptions) error {
	for _, e := range rest {
		if err := extract(e); err != nil {
			return err
		}
	}
	for _, s := range p.scripts {
		dest := "bin/" + s.name
		data := []byte(o.ScriptShebang + "\n" + s.body)
		if err := writeFile(root, dest, data, 0o755); err != nil {
			return err
		}
		known[dest] = writtenData(data, 0o755)
	}
	di := path.Join("site-packages", p.distInfo)
	generated := map[string][]byte{"INSTALLER": []byte("pylayer\n")}
	if o.Requested {
		generated["REQUESTED"] = nil
	}
	for name, data := range generated {
		if err := writeFile(root, path.Join(di, name), data, 0o644); err != nil {
			return err
		}
		known[path.Join(di, name)] = writtenData(data, 0o644)
	}
	return nil
}

// written is a file that Install wrote on purpose: its mode and, when Install wrote the
// bytes itself, their sha256 and size for RECORD.
type written struct {
	mode os.FileMode
	sum  []byte // nil: another program wrote it (a .pyc), finish reads it
	size int64
}

func writtenData(data []byte, mode os.FileMode) written {
	sum := sha256.Sum256(data)
	return written{mode: mode, sum: sum[:], size: int64(len(data))}
}

// extract writes one member, verifying it against RECORD again as it is inflated (the
// archive is read a second time; it must not have changed). It returns the sha256 and
// size of what it wrote: the member's own RECORD hash when that is a sha256 of the very
// bytes written, so that RECORD is written without reading the tree again.
func (p *plan) extract(ctx context.Context, root *os.Root, made dirsMade, e *entry, mode os.FileMode, o InstallOptions) (written, error) {
	w := written{mode: mode}
	if err := made.mkdirAll(root, path.Dir(e.dest)); err != nil {
		return w, err
	}
	if b, ok := p.held[e.zf]; ok {
		delete(p.held, e.zf) // written once: let it go
		return p.writeHeld(root, e, b, mode, o)
	}
	rc, err := e.zf.Open()
	if err != nil {
		return w, fmt.Errorf("%w: opening %s: %v", ErrBadWheel, e.zf.Name, err)
	}
	defer rc.Close()
	out, err := root.OpenFile(e.dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return w, err
	}
	defer out.Close()
	h := e.row.newFn()
	cnt := &counter{}
	src := io.TeeReader(io.LimitReader(fsx.Reader(ctx, rc), e.row.size+1), io.MultiWriter(h, cnt))
	var dst io.Writer = out
	var outSum hash.Hash
	if e.kind == kindScript || e.row.algo != "sha256" {
		outSum = sha256.New()
		dst = io.MultiWriter(out, outSum)
	}
	var n int64
	if e.kind == kindScript {
		// Buffer nothing unverified into the tree: a changed archive fails below and
		// the whole temporary tree is removed.
		n, err = copyScript(dst, src, o.ScriptShebang)
	} else {
		n, err = copyPooled(dst, src)
	}
	if err != nil {
		return w, fmt.Errorf("extracting %s: %w", e.zf.Name, err)
	}
	if _, err := copyPooled(io.Discard, src); err != nil { // copyScript may stop early on errors only
		return w, fmt.Errorf("extracting %s: %w", e.zf.Name, err)
	}
	if err := e.row.check(e.zf.Name, cnt.n, h.Sum(nil)); err != nil {
		return w, fmt.Errorf("archive changed while installing: %w", err)
	}
	w.sum, w.size = e.row.hash, n // the member's bytes, verified against RECORD's sha256
	if outSum != nil {
		w.sum = outSum.Sum(nil)
	}
	return w, out.Close()
}

// writeHeld writes a member from the bytes scan verified (extract's parent directory is
// made): what extract writes, without inflating and checking the member again.
func (p *plan) writeHeld(root *os.Root, e *entry, b []byte, mode os.FileMode, o InstallOptions) (written, error) {
	w := written{mode: mode}
	out, err := root.OpenFile(e.dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return w, err
	}
	defer out.Close()
	if e.kind == kindScript {
		var buf bytes.Buffer
		if _, err := copyScript(&buf, bytes.NewReader(b), o.ScriptShebang); err != nil {
			return w, fmt.Errorf("extracting %s: %w", e.zf.Name, err)
		}
		b = buf.Bytes()
	}
	if _, err := out.Write(b); err != nil {
		return w, fmt.Errorf("extracting %s: %w", e.zf.Name, err)
	}
	if e.kind == kindScript || e.row.algo != "sha256" {
		sum := sha256.Sum256(b)
		w.sum = sum[:]
	} else {
		w.sum = e.row.hash // of these very bytes, verified by scan
	}
	w.size = int64(len(b))
	return w, out.Close()
}

// dirsMade are the directories of a tree made so far, so that each is made once, not
// looked up again for every file in it.
type dirsMade map[string]bool

func (m dirsMade) mkdirAll(root *os.Root, dir string) error {
	if m[dir] {
		return nil
	}
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for ; !m[dir]; dir = path.Dir(dir) {
		m[dir] = true
	}
	return nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func writeFile(root *os.Root, name string, data []byte, mode os.FileMode) error {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// finish fixes modes and times and writes RECORD. It refuses anything in the tree that
// was not written on purpose. Each directory is opened once, and its files are handled
// by name inside it.
func finish(ctx context.Context, root *os.Root, recordPath string, known map[string]written, inst *Installed) error {
	var rows []outRow
	var dirs []string // children before parents
	var walk func(dir string, dr *os.Root) error
	walk = func(dir string, dr *os.Root) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := dr.Open(".")
		if err != nil {
			return err
		}
		ents, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return err
		}
		for _, ent := range ents {
			name := path.Join(dir, ent.Name())
			if ent.IsDir() {
				sub, err := dr.OpenRoot(ent.Name())
				if err != nil {
					return err
				}
				err = walk(name, sub)
				sub.Close()
				if err != nil {
					return err
				}
				continue
			}
			w, ok := known[name]
			if !ok || !ent.Type().IsRegular() {
				return fmt.Errorf("unexpected file %s in the install tree", name)
			}
			if err := settle(dr, ent.Name(), &w); err != nil {
				return err
			}
			inst.Files++
			inst.Bytes += w.size
			rows = append(rows, outRow{recordRel(name), "sha256=" + b64(w.sum), strconv.FormatInt(w.size, 10)})
		}
		dirs = append(dirs, dir)
		return nil
	}
	if err := walk(".", root); err != nil {
		return err
	}
	rows = append(rows, outRow{recordRel(recordPath), "", ""})
	record := writeRecord(rows)
	if err := writeFile(root, recordPath, record, 0o644); err != nil {
		return err
	}
	if err := settle(root, recordPath, &written{mode: 0o644, sum: []byte{}}); err != nil {
		return err
	}
	inst.Files++
	inst.Bytes += int64(len(record))
	for _, dir := range dirs {
		if err := root.Chmod(dir, 0o755); err != nil {
			return err
		}
		if err := root.Chtimes(dir, fixedTime, fixedTime); err != nil {
			return err
		}
	}
	return nil
}

// settle sets the mode and time of file name in dir, and hashes it when w has no sum yet
// (durability comes from one syncfs later).
func settle(dir *os.Root, name string, w *written) error {
	if err := dir.Chmod(name, w.mode); err != nil {
		return err
	}
	if err := dir.Chtimes(name, fixedTime, fixedTime); err != nil {
		return err
	}
	if w.sum != nil {
		return nil
	}
	f, err := dir.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if w.size, err = copyPooled(h, f); err != nil {
		return err
	}
	w.sum = h.Sum(nil)
	return nil
}

// recordRel is a tree path as RECORD lists it: relative to site-packages.
func recordRel(name string) string {
	if rest, ok := strings.CutPrefix(name, "site-packages/"); ok {
		return rest
	}
	return "../" + name
}
