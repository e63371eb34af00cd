package wheel

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
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
// built in a temporary sibling of dest, fsynced and renamed to dest; on any error the
// temporary directory is removed and dest does not exist. File modes are 0644 or 0755,
// directories 0755, and every modification time is the Unix epoch, so the tree depends
// only on the wheel and the options.
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
	p, err := scan(ctx, zr, fn, o)
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
func (p *plan) write(ctx context.Context, tmp string, o InstallOptions) (*Installed, error) {
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	known := map[string]os.FileMode{} // files written here, by tree path, with their mode
	for _, e := range p.entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mode := os.FileMode(0o644)
		if e.exec || e.kind == kindScript {
			mode = 0o755
		}
		if err := p.extract(ctx, root, e, mode, o); err != nil {
			return nil, err
		}
		known[e.dest] = mode
	}
	for _, s := range p.scripts {
		dest := "bin/" + s.name
		if err := writeFile(root, dest, []byte(o.ScriptShebang+"\n"+s.body), 0o755); err != nil {
			return nil, err
		}
		known[dest] = 0o755
	}
	di := path.Join("site-packages", p.distInfo)
	generated := map[string][]byte{"INSTALLER": []byte("pylayer\n")}
	if o.Requested {
		generated["REQUESTED"] = nil
	}
	for name, data := range generated {
		if err := writeFile(root, path.Join(di, name), data, 0o644); err != nil {
			return nil, err
		}
		known[path.Join(di, name)] = 0o644
	}
	var skipped []string
	if o.Interpreter != "" && len(p.pySrcs) > 0 {
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
		pycs, skip, err := c.compile(ctx, site, o.SitePackagesDir, p.pySrcs)
		if err != nil {
			return nil, err
		}
		for _, pyc := range pycs {
			known[pyc] = 0o644
		}
		skipped = skip
	}
	inst := &Installed{Name: p.meta.Name, Version: p.meta.Version, DistInfo: p.distInfo, PycSkipped: skipped}
	if err := finish(ctx, root, di+"/RECORD", known, inst); err != nil {
		return nil, err
	}
	return inst, nil
}

// extract writes one member, verifying it against RECORD again as it is inflated (the
// archive is read a second time; it must not have changed).
func (p *plan) extract(ctx context.Context, root *os.Root, e *entry, mode os.FileMode, o InstallOptions) error {
	if err := root.MkdirAll(path.Dir(e.dest), 0o755); err != nil {
		return err
	}
	rc, err := e.zf.Open()
	if err != nil {
		return fmt.Errorf("%w: opening %s: %v", ErrBadWheel, e.zf.Name, err)
	}
	defer rc.Close()
	out, err := root.OpenFile(e.dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer out.Close()
	h := e.row.newFn()
	cnt := &counter{}
	src := io.TeeReader(io.LimitReader(fsx.Reader(ctx, rc), e.row.size+1), io.MultiWriter(h, cnt))
	if e.kind == kindScript {
		// Buffer nothing unverified into the tree: a changed archive fails below and
		// the whole temporary tree is removed.
		_, err = copyScript(out, src, o.ScriptShebang)
	} else {
		_, err = io.Copy(out, src)
	}
	if err != nil {
		return fmt.Errorf("extracting %s: %w", e.zf.Name, err)
	}
	if _, err := io.Copy(io.Discard, src); err != nil { // copyScript may stop early on errors only
		return fmt.Errorf("extracting %s: %w", e.zf.Name, err)
	}
	if err := e.row.check(e.zf.Name, cnt.n, h.Sum(nil)); err != nil {
		return fmt.Errorf("archive changed while installing: %w", err)
	}
	return out.Close()
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

// finish fixes modes and times and writes RECORD. It
// refuses anything in the tree that was not written on purpose.
func finish(ctx context.Context, root *os.Root, recordPath string, known map[string]os.FileMode, inst *Installed) error {
	var rows []outRow
	var dirs []string
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, name)
			return nil
		}
		mode, ok := known[name]
		if !ok || !d.Type().IsRegular() {
			return fmt.Errorf("unexpected file %s in the install tree", name)
		}
		sum, size, err := settle(root, name, mode)
		if err != nil {
			return err
		}
		inst.Files++
		inst.Bytes += size
		rows = append(rows, outRow{recordRel(name), "sha256=" + b64(sum), strconv.FormatInt(size, 10)})
		return nil
	})
	if err != nil {
		return err
	}
	rows = append(rows, outRow{recordRel(recordPath), "", ""})
	record := writeRecord(rows)
	if err := writeFile(root, recordPath, record, 0o644); err != nil {
		return err
	}
	if _, _, err := settle(root, recordPath, 0o644); err != nil {
		return err
	}
	inst.Files++
	inst.Bytes += int64(len(record))
	for i := len(dirs) - 1; i >= 0; i-- { // children before parents
		if err := root.Chmod(dirs[i], 0o755); err != nil {
			return err
		}
		if err := root.Chtimes(dirs[i], fixedTime, fixedTime); err != nil {
			return err
		}
	}
	return nil
}

// settle sets a file's mode and time and hashes it (durability comes from one syncfs later).
func settle(root *os.Root, name string, mode os.FileMode) ([]byte, int64, error) {
	if err := root.Chmod(name, mode); err != nil {
		return nil, 0, err
	}
	if err := root.Chtimes(name, fixedTime, fixedTime); err != nil {
		return nil, 0, err
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, 0, err
	}
	return h.Sum(nil), n, nil
}

// recordRel is a tree path as RECORD lists it: relative to site-packages.
func recordRel(name string) string {
	if rest, ok := strings.CutPrefix(name, "site-packages/"); ok {
		return rest
	}
	return "../" + name
}
