package lock

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/wheel"
)

// Export formats of a lock, for tools other than pylayer.
const (
	// FormatRequirements is a pip requirements file pinning every package with its
	// sha256: `pip install --require-hashes --no-deps --only-binary=:all: -r FILE`
	// installs exactly the lock's wheels (give pip the index with --index-url or
	// --find-links).
	FormatRequirements = "requirements"
	// FormatPylock is a PEP 751 lock file (pylock.toml, lock-version 1.0): every
	// package with its wheel's file name, URL, size and sha256.
	FormatPylock = "pylock"
)

// ExportFormats are the formats Export writes.
var ExportFormats = []string{FormatRequirements, FormatPylock}

// Export writes l in format. The output depends only on the lock: packages in the lock's
// order (sorted by name), no time stamps. A pylock export needs each package's URL (the
// lock's provenance); a lock without one is refused with the package named.
func Export(l *Lock, format string) ([]byte, error) {
	c := *l
	c.Packages = append([]Package(nil), l.Packages...)
	c.Normalize()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	key, err := c.Key()
	if err != nil {
		return nil, err
	}
	switch format {
	case FormatRequirements:
		return exportRequirements(&c, key), nil
	case FormatPylock:
		return exportPylock(&c, key)
	}
	return nil, fmt.Errorf("unknown export format %q: want %s", format, strings.Join(ExportFormats, " or "))
}

func exportRequirements(l *Lock, key string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# pylayer %s lock %s: %s\n", l.Kind, key, l.Target)
	b.WriteString("# Every package is pinned with its wheel's sha256. Install with:\n")
	b.WriteString("#   pip install --require-hashes --no-deps --only-binary=:all: -r THIS_FILE --index-url URL\n")
	if l.Kind == KindExt {
		fmt.Fprintf(&b, "# An ext layer stacks on its base (key %s): install the base's export too.\n", l.Base)
	}
	for _, p := range l.Packages {
		fmt.Fprintf(&b, "%s==%s \\\n    --hash=sha256:%s\n", p.Name, p.Version, p.SHA256)
	}
	return b.Bytes()
}

func exportPylock(l *Lock, key string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("lock-version = \"1.0\"\n")
	b.WriteString("created-by = \"pylayer\"\n")
	fmt.Fprintf(&b, "requires-python = %s\n", tomlString("=="+l.Target.PythonFull))
	fmt.Fprintf(&b, "environments = [%s]\n", tomlString(environment(l)))
	for _, p := range l.Packages {
		if p.URL == "" {
			return nil, fmt.Errorf("%w: %s %s has no URL, which pylock.toml needs: lock it again with --index-url", ErrInvalid, p.Name, p.Version)
		}
		u, err := url.Parse(p.URL)
		if err != nil || u.User != nil {
			return nil, fmt.Errorf("%w: %s %s: URL %q cannot be exported", ErrInvalid, p.Name, p.Version, p.URL)
		}
		b.WriteString("\n[[packages]]\n")
		fmt.Fprintf(&b, "name = %s\n", tomlString(p.Name))
		fmt.Fprintf(&b, "version = %s\n", tomlString(p.Version))
		if idx := indexOf(u); idx != "" {
			fmt.Fprintf(&b, "index = %s\n", tomlString(idx))
		}
		b.WriteString("\n[[packages.wheels]]\n")
		fmt.Fprintf(&b, "name = %s\n", tomlString(p.Filename))
		fmt.Fprintf(&b, "url = %s\n", tomlString(p.URL))
		fmt.Fprintf(&b, "size = %d\n", p.Size)
		fmt.Fprintf(&b, "hashes = {sha256 = %s}\n", tomlString(p.SHA256))
	}
	b.WriteString("\n[tool.pylayer]\n")
	fmt.Fprintf(&b, "key = %s\n", tomlString(key))
	fmt.Fprintf(&b, "kind = %s\n", tomlString(string(l.Kind)))
	if l.Base != "" {
		fmt.Fprintf(&b, "base = %s\n", tomlString(l.Base))
	}
	fmt.Fprintf(&b, "target = %s\n", tomlString(l.Target.String()))
	return b.Bytes(), nil
}

// environment is the PEP 508 marker the lock was resolved for: its interpreter version,
// implementation, platform and machine.
func environment(l *Lock) string {
	m := l.Target.Markers
	var parts []string
	for _, k := range []string{"implementation_name", "platform_machine", "sys_platform"} {
		if v := m[k]; v != "" {
			parts = append(parts, k+" == "+strconv.Quote(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(append([]string{"python_full_version == " + strconv.Quote(l.Target.PythonFull)}, parts...), " and ")
}

// indexOf guesses the simple-API index a file URL came from: the URL up to /simple/ when
// it has one, else "" (PEP 751's index is optional).
func indexOf(u *url.URL) string {
	if i := strings.Index(u.Path, "/simple/"); i >= 0 {
		v := *u
		v.Path, v.RawQuery, v.Fragment = u.Path[:i+len("/simple/")], "", ""
		return v.String()
	}
	return ""
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		case r == utf8.RuneError:
			b.WriteString(`\uFFFD`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ErrHashMismatch is wrapped when a locked wheel is not one a hashed requirements file
// allows.
var ErrHashMismatch = errors.New("hash mismatch")

// CheckHashes applies pip's hash-checking mode to l: when any requirement line carries
// --hash options, every package of the lock must be named by a hashed line, and its
// wheel's sha256 must be one of that line's. Lines without hashes leave it off, as in pip.
func (l *Lock) CheckHashes(lines []pep508.ReqFileLine) error {
	allowed := map[string][]string{}
	where := map[string]string{}
	for _, ln := range lines {
		if len(ln.Hashes) == 0 {
			continue
		}
		n := wheel.NormalizeName(ln.Req.Name)
		allowed[n] = append(allowed[n], ln.Hashes...)
		where[n] = fmt.Sprintf("%s:%d", ln.File, ln.Line)
	}
	if len(allowed) == 0 {
		return nil
	}
	for _, p := range l.Packages {
		hs, ok := allowed[p.Name]
		if !ok {
			return fmt.Errorf("%w: %s %s is in the lock but the requirements file has no --hash for it "+
				"(in hash-checking mode every package, dependencies included, needs its hashes)", ErrHashMismatch, p.Name, p.Version)
		}
		if !slices.Contains(hs, p.SHA256) {
			return fmt.Errorf("%w: %s %s: the index's %s has sha256 %s, which %s does not allow",
				ErrHashMismatch, p.Name, p.Version, p.Filename, p.SHA256, where[p.Name])
		}
	}
	return nil
}
