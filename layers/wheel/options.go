package wheel

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// Sentinel errors of Install; match them with errors.Is. Messages name the member.
var (
	// ErrUnsafePath: a member's path or type could escape or confuse the tree (absolute,
	// "..", backslash, NUL, symlink, device, setuid/setgid/sticky bit, case-insensitive
	// duplicate).
	ErrUnsafePath = errors.New("unsafe path in wheel")
	// ErrRecordMismatch: RECORD does not describe the archive exactly.
	ErrRecordMismatch = errors.New("RECORD mismatch")
	// ErrTooLarge: a size or count limit of InstallOptions was exceeded.
	ErrTooLarge = errors.New("wheel exceeds install limits")
	// ErrBadWheel: the archive is not a well-formed wheel (no or several .dist-info
	// directories, a .dist-info that does not match the file name, unknown .data
	// directories, bad WHEEL or entry_points.txt, unsupported compression ...).
	ErrBadWheel = errors.New("malformed wheel")
)

// Defaults of InstallOptions.
const (
	DefaultScriptShebang   = "#!/opt/python/bin/python3"
	DefaultSitePackagesDir = "/opt/pylayer/site-packages"
	DefaultMaxFileBytes    = 512 << 20
	DefaultMaxTotalBytes   = 2 << 30
	DefaultMaxFiles        = 100000
)

// InstallOptions controls Install. The zero value is usable.
type InstallOptions struct {
	// ScriptShebang is the first line of every script in bin/, default
	// DefaultScriptShebang. It replaces a "#!python" line of .data/scripts.
	ScriptShebang string
	// Interpreter is a host path of the target python3 used to compile .pyc files;
	// "" compiles nothing (unless Compiler is set).
	Interpreter string
	// Compiler, when set, compiles the .pyc in its processes (Interpreter must then be ""
	// or Compiler's interpreter). Installs running at the same time should share one, so
	// that they share a few interpreter processes instead of starting one each.
	Compiler *Compiler
	// SitePackagesDir is the in-sandbox path of site-packages, the prefix of the
	// co_filename of compiled code; default DefaultSitePackagesDir.
	SitePackagesDir string
	// PythonVersion is the target's "X.Y". When set, a wheel's "pip" and
	// "easy_install" console scripts get the versioned names pip gives them (pip,
	// pipX, pipX.Y; easy_install, easy_install-X.Y) and other versioned variants are
	// dropped, as pip does. "" installs entry points exactly as listed.
	PythonVersion string
	// Requested writes .dist-info/REQUESTED, as pip does for a user-requested install.
	Requested bool
	// NoSync leaves the tree unflushed: the caller flushes it (fsx.SyncFS) before it
	// relies on it surviving a crash, e.g. before renaming it where others trust it, so
	// that the flush can overlap other work.
	NoSync bool
	// TrustedBytes says the wheel's bytes are as trusted as the lock that pinned their
	// hash (an index's wheel that a user or operator locked), not an agent's upload: then
	// its members may be inflated by C, libdeflate in pylayer-full (inflateHeld), about
	// twice as fast as Go's inflater. Otherwise, the default, only Go's memory-safe
	// inflater reads them, as only verified blobs ever reach libdeflate in a pull.
	TrustedBytes bool
	// Limits, checked against RECORD and again while inflating: bytes per file,
	// bytes in total, number of archive members. Zero means the default.
	MaxFileBytes, MaxTotalBytes int64
	MaxFiles                    int
}

var pyVersionRE = lazyre.New(`^[0-9]+\.[0-9]+$`)

// withDefaults fills in defaults and rejects options that cannot be honoured.
func (o InstallOptions) withDefaults() (InstallOptions, error) {
	if o.ScriptShebang == "" {
		o.ScriptShebang = DefaultScriptShebang
	}
	if o.SitePackagesDir == "" {
		o.SitePackagesDir = DefaultSitePackagesDir
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxTotalBytes == 0 {
		o.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.Compiler != nil {
		if o.Interpreter != "" && o.Interpreter != o.Compiler.Interpreter() {
			return o, fmt.Errorf("the Compiler runs %s, Interpreter says %s: give one of them", o.Compiler.Interpreter(), o.Interpreter)
		}
		o.Interpreter = o.Compiler.Interpreter()
	}
	switch {
	case !strings.HasPrefix(o.ScriptShebang, "#!/") || strings.ContainsAny(o.ScriptShebang, "\r\n\x00"):
		return o, fmt.Errorf("invalid ScriptShebang %q: want one line like %q", o.ScriptShebang, DefaultScriptShebang)
	case !path.IsAbs(o.SitePackagesDir) || path.Clean(o.SitePackagesDir) != o.SitePackagesDir || strings.ContainsAny(o.SitePackagesDir, "\r\n\x00"):
		return o, fmt.Errorf("invalid SitePackagesDir %q: want a clean absolute path like %q", o.SitePackagesDir, DefaultSitePackagesDir)
	case o.PythonVersion != "" && !pyVersionRE().MatchString(o.PythonVersion):
		return o, fmt.Errorf("invalid PythonVersion %q: want X.Y like 3.11", o.PythonVersion)
	case o.MaxFileBytes < 0 || o.MaxTotalBytes < 0 || o.MaxFiles < 0:
		return o, fmt.Errorf("negative install limits (file %d, total %d, files %d)", o.MaxFileBytes, o.MaxTotalBytes, o.MaxFiles)
	}
	return o, nil
}

// Installed describes a completed install.
type Installed struct {
	Name, Version string // from METADATA
	DistInfo      string // the .dist-info directory name under site-packages
	Files         int    // regular files in the tree, RECORD and .pyc included
	Bytes         int64  // their total size
	// PycSkipped lists the .py files (relative to site-packages) that did not compile,
	// e.g. Python 2 only test files; pip skips them the same way.
	PycSkipped []string
}
