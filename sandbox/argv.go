package sandbox

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Fixed paths and values inside the sandbox.
const (
	InterpreterDir = "/opt/python"
	ShimBinDir     = "/opt/pylayer/bin"
	WorkspaceDir   = "/workspace"
	Home           = "/home/sandbox"
	// CacheDir is where Spec.Cache is mounted read-write; XDG_CACHE_HOME names it
	// and MPLCONFIGDIR a directory in it, with or without a Spec.Cache.
	CacheDir = Home + "/.cache"
	// Path is the sandbox's PATH, whatever the caller's PATH is, when no layer is
	// mounted; each mounted layer's bin/ comes between /opt/pylayer/bin and
	// /usr/local/bin (see the package documentation).
	Path = "/opt/python/bin:/opt/pylayer/bin:/usr/local/bin:/usr/bin:/bin"

	layersDir = "/opt/pylayer/layers"
	guardDir  = "/opt/pylayer/guard"
	userName  = "sandbox"
	uid       = "1000"
	gid       = "1000"
	// firstDataFD is the descriptor of DataFiles()[0]; exec.Cmd.ExtraFiles[i]
	// becomes descriptor 3+i.
	firstDataFD = 3
)

var (
	//go:embed shim/pip.sh
	pipShim []byte
	//go:embed shim/pip_init.py
	pipGuard []byte
	//go:embed shim/sitecustomize.py
	siteCustomize []byte
)

var (
	passwdData = []byte("root:x:0:0:root:/root:/usr/sbin/nologin\n" +
		userName + ":x:" + uid + ":" + gid + ":pylayer sandbox:" + Home + ":/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	groupData = []byte("root:x:0:\n" + userName + ":x:" + gid + ":\n" + "nogroup:x:65534:\n")
)

// Indexes into DataFiles: the file Argv binds from descriptor firstDataFD+i.
const (
	dataPipShim = iota
	dataPipGuard
	dataPasswd
	dataGroup
	dataSiteCustomize
	numData
)

// DataFiles returns the contents of the files that Argv's command line reads
// from inherited descriptors (bwrap --ro-bind-data): DataFiles()[i] must be
// readable, to its end, from descriptor 3+i of the bwrap process (for example
// exec.Cmd.ExtraFiles[i] set to the read end of a pipe). Run does this.
func DataFiles() [][]byte {
	out := make([][]byte, numData)
	out[dataPipShim] = append([]byte(nil), pipShim...)
	out[dataPipGuard] = append([]byte(nil), pipGuard...)
	out[dataPasswd] = append([]byte(nil), passwdData...)
	out[dataGroup] = append([]byte(nil), groupData...)
	out[dataSiteCustomize] = append([]byte(nil), siteCustomize...)
	return out
}

// Files from the host's /etc that the sandbox gets, read-only, when present:
// what the dynamic loader, time zones, TLS and fontconfig (Pillow's and
// matplotlib's text, fc-match) read. /etc/matplotlibrc is deliberately not one:
// a matplotlib wheel ships its own. Nor are ld.so.conf and ld.so.conf.d: only
// ldconfig reads them, to write the cache, which a session cannot; the loader and
// ldconfig -p read ld.so.cache. Each bind costs bwrap about 0.23 ms of every
// session start.
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives", "/etc/ssl/certs", "/etc/fonts",
}

// Other host directories the sandbox gets, read-only, when present: the system's
// font cache (fc-cache), so that fontconfig does not scan every font of /usr/share/fonts
// in each session. It holds only what fc-cache made of the fonts under /usr.
var hostCaches = []string{"/var/cache/fontconfig"}

// Top-level directories that merged-usr systems make symlinks into /usr.
var usrLinks = []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// pip names that run the shim.
var pipNames = []string{"pip", "pip3", "pip3.9", "pip3.10", "pip3.11", "pip3.12", "pip3.13", "pip3.14"}

// hostFS is the little of the host file system that Argv looks at.
type hostFS interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	EvalSymlinks(name string) (string, error)
}

type osFS struct{}

func (osFS) Lstat(name string) (fs.FileInfo, error)   { return os.Lstat(name) }
func (osFS) Readlink(name string) (string, error)     { return os.Readlink(name) }
func (osFS) EvalSymlinks(name string) (string, error) { return filepath.EvalSymlinks(name) }

// usrSymlink returns the target of host path p when p is a symlink that points into
// /usr and resolves, on the host, to a file under /usr: the sandbox, which has the
// host's /usr at /usr, gets the same symlink instead of a bind (a bind costs bwrap
// about 0.2 ms; Debian's /etc/localtime is such a link).
func usrSymlink(host hostFS, p string) (string, bool) {
	fi, err := host.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return "", false
	}
	target, err := host.Readlink(p)
	if err != nil || target == "" {
		return "", false
	}
	first := target
	if !filepath.IsAbs(first) {
		first = filepath.Join(filepath.Dir(p), first)
	}
	final, err := host.EvalSymlinks(p)
	under := func(q string) bool { return strings.HasPrefix(filepath.Clean(q), "/usr/") }
	if err != nil || !under(first) || !under(final) {
		return "", false
	}
	return target, true
}

// Argv returns the complete command line, starting with bwrap (an absolute
// path, see FindBwrap), that runs s.Command in a sandbox: Build's Plan.Args. It
// neither checks that s's paths exist nor runs anything. An invalid Spec gives an
// error matching ErrInvalidSpec.
func Argv(bwrap string, s Spec) ([]string, error) {
	p, err := Build(bwrap, s)
	if err != nil {
		return nil, err
	}
	return p.Args, nil
}

// FileKind says what an inherited descriptor of a Plan is.
type FileKind int

const (
	// FileData is the read end of a pipe holding File.Data (--ro-bind-data, --seccomp).
	FileData FileKind = iota
)

// File is what one inherited descriptor of a Plan holds.
type File struct {
	Kind FileKind
	Data []byte // FileData
}

// Plan is a sandbox as plain data: bwrap's command line, and what each
// descriptor it reads must be. Files[i] is descriptor 3+i of the bwrap process
// (exec.Cmd.ExtraFiles[i]).
type Plan struct {
	Args  []string
	Files []File
}

// Build returns the Plan that runs s.Command in a sandbox. Build looks only at
// whether the host's /bin, /lib ... are symlinks.
func Build(bwrap string, s Spec) (*Plan, error) {
	return build(osFS{}, bwrap, s)
}

func argv(host hostFS, bwrap string, s Spec) ([]string, error) {
	p, err := build(host, bwrap, s)
	if err != nil {
		return nil, err
	}
	return p.Args, nil
}

// plan collects descriptors while the command line is built.
type plan struct{ files []File }

func (p *plan) add(f File) string {
	p.files = append(p.files, f)
	return strconv.Itoa(firstDataFD + len(p.files) - 1)
}

func build(host hostFS, bwrap string, s Spec) (*Plan, error) {
	if err := checkHostPath("bwrap", bwrap); err != nil {
		return nil, err
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return nil, fmt.Errorf("%w: no command to run", ErrInvalidSpec)
	}
	for i, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("%w: command argument %d contains a NUL byte", ErrInvalidSpec, i)
		}
	}
	if s.Interpreter != "" {
		if err := checkHostPath("interpreter", s.Interpreter); err != nil {
			return nil, err
		}
	}
	if s.Workspace != "" {
		if err := checkHostPath("workspace", s.Workspace); err != nil {
			return nil, err
		}
	}
	if s.Support != "" {
		if err := checkHostPath("support", s.Support); err != nil {
			return nil, err
		}
	}
	if s.Cache != "" {
		if err := checkHostPath("cache", s.Cache); err != nil {
			return nil, err
		}
		if s.Cache == s.Workspace {
			return nil, fmt.Errorf("%w: cache %s is also the workspace: give the session's cache a directory of its own", ErrInvalidSpec, s.Cache)
		}
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = WorkspaceDir
	}
	if err := checkSandboxPath("cwd", cwd); err != nil {
		return nil, err
	}
	lim, err := s.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	layers, err := layerMounts(s.Layers)
	if err != nil {
		return nil, err
	}
	env, err := environment(s.Env, layers)
	if err != nil {
		return nil, err
	}

	// Without a support tree, the data files come first, at the descriptors DataFiles
	// documents.
	var p plan
	if s.Support == "" {
		for _, d := range DataFiles() {
			p.add(File{Kind: FileData, Data: d})
		}
	}
	a := []string{bwrap, "--unshare-all", "--unshare-user"}
	if s.Network {
		a = append(a, "--share-net")
	}
	a = append(a, "--uid", uid, "--gid", gid, "--hostname", userName)
	if !s.unhardened {
		a = append(a, "--disable-userns")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL")
	if !s.unhardened {
		prog, err := seccompProgram()
		if err != nil {
			return nil, fmt.Errorf("%w: building the seccomp filter: %w", ErrInvalidSpec, err)
		}
		if prog != nil {
			// A copy: the program is built once per process, and a Plan is the caller's.
			a = append(a, "--seccomp", p.add(File{Kind: FileData, Data: bytes.Clone(prog)}))
		}
	}
	a = append(a, "--ro-bind", "/usr", "/usr")
	for _, d := range usrLinks {
		fi, err := host.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("inspecting host %s: %w", d, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := host.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("inspecting host %s: %w", d, err)
			}
			a = append(a, "--symlink", target, d)
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, f := range slices.Concat(etcFiles, hostCaches) {
		if target, ok := usrSymlink(host, f); ok {
			a = append(a, "--symlink", target, f) // no mount: /usr is the host's
		} else {
			a = append(a, "--ro-bind-try", f, f)
		}
	}
	size := func(n int64) string { return strconv.FormatInt(n, 10) }
	if s.Support != "" {
		a = append(a,
			"--symlink", supportMount+"/etc/passwd", "/etc/passwd",
			"--symlink", supportMount+"/etc/group", "/etc/group")
	} else {
		a = append(a,
			"--perms", "0444", "--ro-bind-data", fd(dataPasswd), "/etc/passwd",
			"--perms", "0444", "--ro-bind-data", fd(dataGroup), "/etc/group")
	}
	a = append(a, "--proc", "/proc")
	if s.unhardened {
		a = append(a, "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/home")
	} else {
		a = append(a,
			// A fresh /proc whose kernel knobs are read-only, whatever uid the sandbox maps to.
			"--ro-bind", "/proc/sys", "/proc/sys",
			// bwrap's /dev is a tmpfs of its own: its shm gets a sized tmpfs, the rest is read-only.
			"--dev", "/dev", "--size", size(lim.Shm), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
			"--size", size(lim.Tmp), "--tmpfs", "/tmp", "--size", size(lim.Home), "--tmpfs", "/home")
	}
	a = append(a, "--perms", "0700", "--dir", Home)
	if s.Cache != "" {
		a = append(a, "--bind", s.Cache, CacheDir)
	}
	if s.Interpreter != "" {
		a = append(a, "--ro-bind", s.Interpreter, InterpreterDir)
	} else {
		a = append(a,
			"--symlink", "/usr/bin/python3", InterpreterDir+"/bin/python3",
			"--symlink", "python3", InterpreterDir+"/bin/python")
	}
	if s.Support != "" {
		a = append(a, "--ro-bind", supportPath(s.Support), supportMount)
		if s.guardPyc != "" {
			a = append(a, "--ro-bind", s.guardPyc, supportMount+"/guard/__pycache__")
		}
		a = append(a, "--symlink", "support/bin", ShimBinDir, "--symlink", "support/guard", guardDir)
	} else {
		a = append(a, "--perms", "0555", "--ro-bind-data", fd(dataPipShim), ShimBinDir+"/pip")
		for _, n := range pipNames[1:] {
			a = append(a, "--symlink", "pip", ShimBinDir+"/"+n)
		}
		a = append(a,
			"--perms", "0444", "--ro-bind-data", fd(dataPipGuard), guardDir+"/pip/__init__.py",
			"--perms", "0444", "--ro-bind-data", fd(dataSiteCustomize), guardDir+"/sitecustomize.py")
	}
	for _, l := range layers {
		a = append(a, "--ro-bind", l.host, l.dest)
	}
	if s.Workspace != "" {
		a = append(a, "--bind", s.Workspace, WorkspaceDir)
	} else {
		a = append(a, "--perms", "0755", "--size", size(lim.Tmp), "--tmpfs", WorkspaceDir)
	}
	a = append(a, "--remount-ro", "/", "--chdir", cwd, "--clearenv")
	for _, kv := range env {
		a = append(a, "--setenv", kv[0], kv[1])
	}
	a = append(a, "--")
	if !s.unhardened {
		a = append(a, limitPrefix(lim)...)
	}
	return &Plan{Args: append(a, s.Command...), Files: p.files}, nil
}

// Prlimit is util-linux's prlimit(1), part of every Debian system: the first
// program of every session, it sets the session's resource limits on itself and
// runs the command with them (see Limits).
const Prlimit = "/usr/bin/prlimit"

// limitPrefix is the prlimit command line that runs the command under lim.
func limitPrefix(lim Limits) []string {
	n := func(name string, v int64) string { return "--" + name + "=" + strconv.FormatInt(v, 10) }
	a := []string{Prlimit,
		n("nproc", int64(lim.Processes)), n("as", lim.Memory), n("nofile", int64(lim.OpenFiles)),
		n("fsize", lim.FileSize), "--core=0"}
	if lim.CPU > 0 {
		// SIGXCPU at the soft limit, which Result reports; SIGKILL a second later.
		secs := int64(lim.CPU / time.Second)
		a = append(a, fmt.Sprintf("--cpu=%d:%d", secs, secs+1))
	}
	return append(a, "--")
}

func fd(i int) string { return strconv.Itoa(firstDataFD + i) }

// pathOf is the sandbox's PATH: the interpreter's bin/, the pip shim (which must
// win over a layer's pip), each mounted layer's bin/ in PYTHONPATH order (ext
// layers first; an iso layer in place of the base), then the system's.
func pathOf(layers []mountedLayer) string {
	dirs := []string{InterpreterDir + "/bin", ShimBinDir}
	for _, l := range layers {
		dirs = append(dirs, l.dest+"/bin")
	}
	return strings.Join(append(dirs, "/usr/local/bin", "/usr/bin", "/bin"), ":")
}

// environment returns the sandbox's variables sorted by name.
func environment(extra map[string]string, layers []mountedLayer) ([][2]string, error) {
	pp := []string{guardDir}
	for _, l := range layers {
		pp = append(pp, l.dest+"/site-packages")
	}
	vars := map[string]string{
		"PATH":                    pathOf(layers),
		"XDG_CACHE_HOME":          CacheDir,
		"MPLCONFIGDIR":            CacheDir + "/matplotlib",
		"MPLBACKEND":              "Agg",
		"PYTHONPATH":              strings.Join(pp, ":"),
		"PIP_NO_INDEX":            "1",
		"PYTHONDONTWRITEBYTECODE": "1",
		"PYTHONNOUSERSITE":        "1",
		"HOME":                    Home,
		"USER":                    userName,
		"LOGNAME":                 userName,
		"LANG":                    "C.UTF-8",
	}
	for k, v := range extra {
		if err := checkEnv(k, v); err != nil {
			return nil, err
		}
		vars[k] = v
	}
	out := make([][2]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out, nil
}
