package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrInvalidSpec: a Spec or RunOptions field cannot be honoured (a relative
	// path, a NUL byte, an unknown layer kind, two base layers ...).
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrSecretEnv: Spec.Env names a variable that looks like a secret. Such a
	// variable is refused, never passed on silently; it also matches ErrInvalidSpec.
	ErrSecretEnv = errors.New("secret-looking environment variable refused")
)

// Layer kinds.
const (
	KindBase = "base"
	KindExt  = "ext"
	KindIso  = "iso"
)

// Layer is one read-only layer root on the host: site-packages/ and maybe bin/.
type Layer struct {
	Root string // absolute host path of the layer root
	Kind string // KindBase, KindExt or KindIso
	Name string // for error messages only
}

// Spec describes one sandboxed command. Every host path must be absolute and
// clean; see the package documentation for what the sandbox looks like.
type Spec struct {
	// Interpreter is a host CPython prefix (with bin/python3) mounted read-only at
	// /opt/python; "" is degraded mode: the host's /usr/bin/python3.
	Interpreter string
	// Layers are mounted read-only; at most one base and at most one iso, which
	// replaces the base. Ext layers come first on PYTHONPATH, in this order.
	Layers []Layer
	// Workspace is a host directory mounted read-write at /workspace; "" gives a
	// tmpfs /workspace.
	Workspace string
	// Cache is a host directory mounted read-write at CacheDir
	// (/home/sandbox/.cache: XDG_CACHE_HOME, and MPLCONFIGDIR in it), kept
	// across the runs of one session so that what programs cache there
	// (matplotlib's font list, ~200 ms to build) is built once per session; ""
	// leaves it in the tmpfs home, rebuilt by every run. It is handed to the
	// sandbox user like the workspace. Never give two sessions one cache: what
	// one session writes there, the other would load.
	Cache string
	// Support is a host directory where Run keeps the files every sandbox gets from
	// pylayer (the pip shim, the guard, /etc/passwd and /etc/group), written once per
	// content and bound with one mount (see supportMount); "" hands them to bwrap as
	// data on every start instead, about 1 ms more. The host cache's "sandbox"
	// directory is the one the CLI and the broker give.
	Support string
	// Env holds extra variables the caller names explicitly. A name that looks
	// like a secret (ErrSecretEnv) or that the sandbox sets itself (PATH, HOME,
	// PYTHONPATH, PIP_*, LD_* ...) is refused.
	Env map[string]string
	// Command is the program and its arguments; a program without a slash is
	// looked up on the sandbox's fixed PATH.
	Command []string
	// Cwd is the working directory inside the sandbox, default /workspace.
	Cwd string
	// Network shares the host's network namespace; for tests of the flag only.
	Network bool
	// Limits are the session's resource limits (defaults when zero).
	Limits Limits

	// unhardened builds the sandbox as pylayer did before it was hardened (no
	// seccomp, no limits, nested user namespaces, writable /proc/sys, bwrap run
	// as the caller): only for the benchmark that measures what hardening costs,
	// never for a session. It is unexported so nothing outside can ask for it.
	unhardened bool
	// guardPyc is the host directory of the guard's bytecode that prepare found or made
	// for this session (guardpyc.go), bound at the support tree's guard/__pycache__;
	// noGuardPyc is set on the session that compiles it.
	guardPyc   string
	noGuardPyc bool
}

// Degraded reports whether s runs the host's /usr/bin/python3 instead of a
// pylayer interpreter artifact.
func (s Spec) Degraded() bool { return s.Interpreter == "" }

// secretRE matches variable names that must never be passed into a sandbox.
var secretRE = lazyre.New(`(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|_PASS$|_PWD$|CREDENTIAL|AUTH|COOKIE|PRIVATE|SIGNING|AWS_|AZURE_|GOOGLE_|GCP_|GCLOUD|COSIGN|SIGSTORE|GITHUB|GITLAB|GH_|HF_|HUGGING|OPENAI|ANTHROPIC|NPM_|PYPI|TWINE|DOCKER|REGISTRY|VAULT|DSN|DATABASE_URL|CONNECTION)`)

// envNameRE is what a portable environment variable name looks like.
var envNameRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv reports whether the sandbox sets or must control name itself.
func reservedEnv(name string) bool {
	u := strings.ToUpper(name)
	switch u {
	case "PATH", "HOME", "USER", "LOGNAME", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE",
		"PYTHONDONTWRITEBYTECODE", "PYTHONUSERBASE", "PYTHONSTARTUP", "PYTHONEXECUTABLE",
		"PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "PYTHONNOUSERSITEDIRS", "SHELL", "ENV", "BASH_ENV",
		"TMPDIR":
		return true
	}
	return strings.HasPrefix(u, "LD_") || strings.HasPrefix(u, "PIP_") || strings.HasPrefix(u, "GCONV_")
}

// checkEnv validates one Spec.Env entry.
func checkEnv(name, value string) error {
	switch {
	case !envNameRE().MatchString(name):
		return fmt.Errorf("%w: environment variable name %q: want letters, digits and _", ErrInvalidSpec, name)
	case secretRE().MatchString(name):
		return fmt.Errorf("%w: %w: %s looks like a credential; secrets never enter the sandbox, rename the variable if it is not one",
			ErrInvalidSpec, ErrSecretEnv, name)
	case reservedEnv(name):
		return fmt.Errorf("%w: environment variable %s is set by the sandbox itself and cannot be overridden", ErrInvalidSpec, name)
	case strings.IndexByte(value, 0) >= 0:
		return fmt.Errorf("%w: environment variable %s: value contains a NUL byte", ErrInvalidSpec, name)
	}
	return nil
}

// checkHostPath validates a host path given for field: absolute, clean, no NUL,
// not the root and not inside the host's /proc, /sys or /dev.
func checkHostPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: %s: empty path", ErrInvalidSpec, field)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: %s %q: contains a NUL byte", ErrInvalidSpec, field, p)
	case !filepath.IsAbs(p) || !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: %s %q: want an absolute path", ErrInvalidSpec, field, p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%w: %s %q: want a clean path (%q)", ErrInvalidSpec, field, p, filepath.Clean(p))
	case p == "/":
		return fmt.Errorf("%w: %s: the host's root directory cannot be mounted into the sandbox", ErrInvalidSpec, field)
	}
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("%w: %s %q: paths under %s cannot be mounted into the sandbox", ErrInvalidSpec, field, p, d)
		}
	}
	return nil
}

// checkSandboxPath validates an absolute path inside the sandbox (Cwd).
func checkSandboxPath(field, p string) error {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: %s %q: contains a NUL byte", ErrInvalidSpec, field, p)
	case !strings.HasPrefix(p, "/") || filepath.Clean(p) != p:
		return fmt.Errorf("%w: %s %q: want a clean absolute path", ErrInvalidSpec, field, p)
	}
	return nil
}

// mountedLayer is a layer as it appears in the sandbox.
type mountedLayer struct {
	host, dest string
	kind       string
}

// layerMounts validates s.Layers and returns the layers to mount in PYTHONPATH
// order: ext layers in Spec order, then the iso layer or else the base.
func layerMounts(layers []Layer) ([]mountedLayer, error) {
	var exts []mountedLayer
	var base, iso *mountedLayer
	for i, l := range layers {
		field := fmt.Sprintf("layer %d", i)
		if l.Name != "" {
			field = fmt.Sprintf("layer %d (%q)", i, l.Name)
		}
		if err := checkHostPath(field, l.Root); err != nil {
			return nil, err
		}
		m := mountedLayer{host: l.Root, dest: fmt.Sprintf("%s/%d-%s", layersDir, i, l.Kind), kind: l.Kind}
		switch l.Kind {
		case KindExt:
			exts = append(exts, m)
		case KindBase:
			if base != nil {
				return nil, fmt.Errorf("%w: %s: a second base layer; a sandbox stacks on one base", ErrInvalidSpec, field)
			}
			base = &m
		case KindIso:
			if iso != nil {
				return nil, fmt.Errorf("%w: %s: a second iso layer; an iso layer replaces the one base", ErrInvalidSpec, field)
			}
			iso = &m
		default:
			return nil, fmt.Errorf("%w: %s: unknown kind %q (want base, ext or iso)", ErrInvalidSpec, field, l.Kind)
		}
	}
	out := exts
	switch {
	case iso != nil:
		out = append(out, *iso)
	case base != nil:
		out = append(out, *base)
	}
	return out, nil
}
