package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/native"
	"github.com/pylayer/pylayer/layers/wheel"
)

// Fetcher downloads one file of an index with its hash checked; *index.Client is one.
type Fetcher interface {
	Files(ctx context.Context, project string) ([]index.File, error)
	Download(ctx context.Context, f index.File, dst string) error
}

var _ Fetcher = (*index.Client)(nil)

// The in-sandbox paths baked into trees: script shebangs, and the co_filename prefix of
// build-time .pyc. Changing either changes every tree's bytes.
const (
	ScriptShebang   = "#!/opt/python/bin/python3"
	SitePackagesDir = "/opt/pylayer/site-packages"
)

// Options says how wheels are installed.
type Options struct {
	// Interpreter is the host path of the target's python3, used to compile .pyc at build
	// time; "" builds without .pyc.
	Interpreter string
	// Jobs bounds parallel installs; 0 means 4 x GOMAXPROCS: an install spends much of
	// its time waiting for the interpreter and for flushes, and a small wheel waiting so
	// should not keep a big one that came later from starting. The .pyc are compiled by
	// at most GOMAXPROCS interpreter processes.
	Jobs int
	// NativeMissing is called, by the worker that made it, for each tree of a build
	// (EachTree) whose compiled code needs shared libraries that are neither in the
	// tree nor on the target platform's allow-list (see NativeReport): a warning to
	// show, or an error that fails the build. nil logs a warning.
	NativeMissing func(ctx context.Context, t Tree, r *native.Report) error
	// TrustedWheels says every wheel this builder installs is as trusted as the lock that
	// pinned its hash (wheel.InstallOptions.TrustedBytes): set for a user's own builds,
	// not for a broker's, which installs agents' uploads. It changes no byte of a tree.
	TrustedWheels bool
}

// Builder makes trees for the packages of locks, caching under Root.
type Builder struct {
	Root    string  // cache root: wheels/ and trees/ live below it
	Fetcher Fetcher // nil: wheels must already be in the wheelhouse
	Options Options

	once     sync.Once
	interpID string
	interpEr error
	spareMu  sync.Mutex
	spare    *wheel.Compiler // started by CompiledBy, taken by the next build
	fetchMu  sync.Mutex
	fetches  map[string]*fetch // wheels being prefetched, by sha256
}

// Tree is one installed wheel.
type Tree struct {
	Package lock.Package
	Dir     string // the tree: site-packages/, bin/ ...
	Key     string // hash of the wheel and the install options; same key, same bytes
}

// Tree returns the installed tree of one package for a target's python ("3.11"),
// building it if it is not cached.
func (b *Builder) Tree(ctx context.Context, p lock.Package, python string) (Tree, error) {
	opts, id, err := b.installOptions(ctx, python)
	if err != nil {
		return Tree{}, err
	}
	t := b.treeOf(p, id)
	if _, err := os.Stat(t.Dir); err == nil {
		return t, nil // trees are renamed into place whole: present means complete
	}
	whl, err := b.Wheel(ctx, p)
	if err != nil {
		return Tree{}, err
	}
	return t, b.install(ctx, t, whl, opts, nil)
}

// treeOf is where the tree of p installed with the options identified by optsID lives.
func (b *Builder) treeOf(p lock.Package, optsID string) Tree {
	key := treeKey(p.SHA256, optsID)
	return Tree{Package: p, Dir: filepath.Join(b.Root, "trees", key), Key: key}
}

// install installs wheel whl as tree t, unless another process did first, and calls fn
// (unless nil) with it in its temporary directory while it is flushed, before it is
// renamed into place.
func (b *Builder) install(ctx context.Context, t Tree, whl string, opts wheel.InstallOptions, fn func(Tree) error) error {
	if _, err := os.Stat(t.Dir); err == nil {
		if fn != nil {
			return fn(t)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(t.Dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(t.Dir), ".tmp-"+t.Key[:16]+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	inst := filepath.Join(tmp, "tree")
	opts.NoSync = true // flushed below, while fn works
	if _, err := wheel.Install(ctx, whl, inst, opts); err != nil {
		return fmt.Errorf("installing %s: %w", t.Package.Filename, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return fsx.SyncFS(gctx, inst) })
	if fn != nil {
		g.Go(func() error {
			at := t
			at.Dir = inst
			return fn(at)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := os.Rename(inst, t.Dir); err != nil {
		if _, statErr := os.Stat(t.Dir); statErr == nil {
			return nil // another process finished the same tree first
		}
		return fmt.Errorf("publishing tree of %s: %w", t.Package.Filename, err)
	}
	logctx.From(ctx).Debug("installed", "wheel", t.Package.Filename, "tree", t.Dir)
	return nil
}

// Wheel returns the path of the package's wheel in the wheelhouse, downloading it (hash
// checked) when it is missing.
func (b *Builder) Wheel(ctx context.Context, p lock.Package) (string, error) {
	if err := validName(p.Filename); err != nil {
		return "", err
	}
	if path, ok := b.inWheelhouse(p); ok {
		return path, nil
	}
	if b.Fetcher == nil {
		return "", fmt.Errorf("%s is not in the wheelhouse %s and no index was given (--index-url)", p.Filename, filepath.Join(b.Root, "wheels"))
	}
	if f := b.underWay(p); f != nil { // a prefetch: its result, or else try again here
		select {
		case <-f.done:
			if f.err == nil {
				return f.path, nil
			}
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return b.download(ctx, p)
}

// locate finds the package's file on the index (which may have moved since the lock was
// made); failing that it uses the lock's URL. The lock's hash is what is checked either way.
func (b *Builder) locate(ctx context.Context, p lock.Package) (index.File, error) {
	want := index.File{Project: p.Name, Filename: p.Filename, URL: p.URL, SHA256: p.SHA256, Size: p.Size}
	files, err := b.Fetcher.Files(ctx, p.Name)
	if err != nil && !errors.Is(err, index.ErrNotFound) {
		return index.File{}, fmt.Errorf("looking up %s on the index: %w", p.Name, err)
	}
	for _, f := range files {
		if f.Filename == p.Filename {
			if f.SHA256 != "" && f.SHA256 != p.SHA256 {
				return index.File{}, fmt.Errorf("%w: the index says %s has sha256 %s, the lock says %s", index.ErrHashMismatch, p.Filename, f.SHA256, p.SHA256)
			}
			want.URL = f.URL
			return want, nil
		}
	}
	if _, err := url.Parse(p.URL); err != nil || p.URL == "" {
		return index.File{}, fmt.Errorf("%s is not on the index and the lock has no usable URL", p.Filename)
	}
	return want, nil
}

func validName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".." {
		return fmt.Errorf("unsafe wheel filename %q", name)
	}
	return nil
}

// installOptions are the wheel install options and a string that identifies them,
// including the interpreter's exact version when .pyc are compiled.
func (b *Builder) installOptions(ctx context.Context, python string) (wheel.InstallOptions, string, error) {
	opts := wheel.InstallOptions{
		PythonVersion:   python, // pip's versioned scripts: pip3.11, easy_install-3.11
		Requested:       true,   // always, so a wheel's tree (and blob) is the same in every layer
		Interpreter:     b.Options.Interpreter,
		ScriptShebang:   ScriptShebang,
		SitePackagesDir: SitePackagesDir,
		TrustedBytes:    b.Options.TrustedWheels,
	}
	compiledBy, err := b.CompiledBy(ctx)
	if err != nil {
		return opts, "", err
	}
	id := fmt.Sprintf("v1|shebang=%s|site=%s|requested=%v|python=%s|pyc=%s", opts.ScriptShebang, opts.SitePackagesDir, opts.Requested, python, compiledBy)
	return opts, id, nil
}

// CompiledBy is the lock.CompiledBy of what this builder compiles .pyc with: "" without
// an interpreter, else lock.CompiledByOf what the interpreter reports (its cache tag,
// magic number and sys.version), asked once (nothing written into its prefix).
//
// The interpreter is asked by starting the wheel.Compiler of the next build (EachTree),
// which then finds its processes up: a build that compiles starts no interpreter of its
// own. Processes that no build takes end with this process.
func (b *Builder) CompiledBy(ctx context.Context) (string, error) {
	b.once.Do(func() {
		if b.Options.Interpreter == "" {
			return
		}
		c, err := wheel.NewCompiler(context.WithoutCancel(ctx), b.Options.Interpreter, compileProcs(0))
		var info wheel.InterpreterInfo
		if err == nil {
			if info, err = c.Describe(ctx); err != nil {
				c.Close()
			}
		}
		if err != nil {
			b.interpEr = fmt.Errorf("running interpreter %s to compile .pyc: %w", b.Options.Interpreter, err)
			return
		}
		b.interpID = lock.CompiledByOf(info.CacheTag, info.Magic, info.SysVersion)
		b.spare = c
	})
	return b.interpID, b.interpEr
}

// compiler is the Compiler CompiledBy started, if no build took it yet, else a new one.
func (b *Builder) compiler(ctx context.Context, procs int) (*wheel.Compiler, error) {
	if c := b.takeSpare(); c != nil {
		return c, nil
	}
	return wheel.NewCompiler(ctx, b.Options.Interpreter, procs)
}

func (b *Builder) takeSpare() *wheel.Compiler {
	b.spareMu.Lock()
	defer b.spareMu.Unlock()
	c := b.spare
	b.spare = nil
	return c
}

// compileProcs is how many interpreter processes compile the .pyc of a build of jobs
// installs at a time (0: the default): GOMAXPROCS at most.
func compileProcs(jobs int) int {
	if jobs <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return min(jobs, runtime.GOMAXPROCS(0))
}

// Stamp returns l as this builder builds it: a copy whose CompiledBy names the
// interpreter the builder compiles .pyc with ("" for none), so that its key (and tag)
// covers the .pyc bytes. A lock that already names another compiling interpreter is
// refused: build it with that interpreter, or drop compiled_by from it. Take the key of
// the stamped lock, and give it to oci.LayerArtifact. Stamp also starts fetching the
// lock's missing wheels (Prefetch), which its build needs next.
func (b *Builder) Stamp(ctx context.Context, l *lock.Lock) (*lock.Lock, error) {
	if _, err := l.Key(); err == nil {
		b.Prefetch(ctx, l) // the wheels come while the interpreter starts
	}
	by, err := b.CompiledBy(ctx)
	if err != nil {
		return nil, err
	}
	if l.CompiledBy != "" && l.CompiledBy != by {
		with := "no interpreter"
		if by != "" {
			with = fmt.Sprintf("%q", by)
		}
		return nil, fmt.Errorf("the lock's .pyc are compiled by %q and this build compiles with %s: give --interpreter that interpreter, or drop compiled_by from the lock", l.CompiledBy, with)
	}
	c := *l
	c.CompiledBy = by
	if _, err := c.Key(); err != nil {
		if by != "" {
			return nil, fmt.Errorf("--interpreter %s cannot compile this lock's .pyc: %w", b.Options.Interpreter, err)
		}
		return nil, err
	}
	return &c, nil
}

func treeKey(wheelSHA, optsID string) string {
	h := sha256.Sum256([]byte(wheelSHA + "\n" + optsID))
	return hex.EncodeToString(h[:])
}

// Interpreter resolves the python3 of a prefix (PREFIX/bin/python3) or a path to a binary.
func Interpreter(prefixOrBinary string) (string, error) {
	if prefixOrBinary == "" {
		return "", nil
	}
	fi, err := os.Stat(prefixOrBinary)
	if err != nil {
		return "", fmt.Errorf("--interpreter: %w", err)
	}
	p := prefixOrBinary
	if fi.IsDir() {
		p = filepath.Join(prefixOrBinary, "bin", "python3")
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 || fi.Mode()&fs.ModeType != 0 && fi.Mode()&fs.ModeSymlink == 0 {
			return "", fmt.Errorf("--interpreter %s: no executable bin/python3 in that prefix", prefixOrBinary)
		}
	}
	return filepath.Abs(p)
}
