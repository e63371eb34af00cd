package wheel

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
	"github.com/pylayer/pylayer/layers/pep508"
)

// ErrBadFilename reports a wheel filename that does not follow
// {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl.
var ErrBadFilename = errors.New("malformed wheel filename")

// Filename is a parsed wheel filename. Name and Version are as they appear in the file
// (the name with "_" for runs of "-_."); the tag components are split on ".".
type Filename struct {
	Name, Version, Build  string
	Python, ABI, Platform []string
}

var (
	nameRE    = lazyre.New(`^[A-Za-z0-9._]+$`)
	versionRE = lazyre.New(`^[A-Za-z0-9._+!]+$`)
	buildRE   = lazyre.New(`^[0-9][A-Za-z0-9._]*$`)
	tagRE     = lazyre.New(`^[A-Za-z0-9_]+$`)
)

// ParseFilename parses a wheel file name (a base name, not a path).
func ParseFilename(s string) (Filename, error) {
	bad := func(why string) (Filename, error) {
		return Filename{}, fmt.Errorf("%w %q: %s", ErrBadFilename, s, why)
	}
	if strings.ContainsAny(s, "/\\\x00") || strings.Contains(s, "..") {
		return bad("contains a path separator, NUL or \"..\"")
	}
	stem, ok := strings.CutSuffix(s, ".whl")
	if !ok {
		return bad("does not end in .whl")
	}
	parts := strings.Split(stem, "-")
	var f Filename
	switch len(parts) {
	case 5:
		f.Name, f.Version = parts[0], parts[1]
	case 6:
		f.Name, f.Version, f.Build = parts[0], parts[1], parts[2]
		if !buildRE().MatchString(f.Build) {
			return bad("build tag " + quoteOrEmpty(f.Build) + " must start with a digit and use only [A-Za-z0-9._]")
		}
	default:
		return bad(fmt.Sprintf("has %d dash-separated parts, want 5 or 6", len(parts)))
	}
	if !nameRE().MatchString(f.Name) {
		return bad("name " + quoteOrEmpty(f.Name) + " must be non-empty [A-Za-z0-9._]")
	}
	if !versionRE().MatchString(f.Version) {
		return bad("version " + quoteOrEmpty(f.Version) + " must be non-empty [A-Za-z0-9._+!]")
	}
	tags := parts[len(parts)-3:]
	sets := [3]*[]string{&f.Python, &f.ABI, &f.Platform}
	for i, t := range tags {
		for _, c := range strings.Split(t, ".") {
			if !tagRE().MatchString(c) {
				return bad("tag " + quoteOrEmpty(t) + " has an empty or invalid component")
			}
			*sets[i] = append(*sets[i], c)
		}
	}
	return f, nil
}

func quoteOrEmpty(s string) string { return fmt.Sprintf("%q", s) }

// String is the file name again.
func (f Filename) String() string {
	parts := []string{f.Name, f.Version}
	if f.Build != "" {
		parts = append(parts, f.Build)
	}
	parts = append(parts, strings.Join(f.Python, "."), strings.Join(f.ABI, "."), strings.Join(f.Platform, "."))
	return strings.Join(parts, "-") + ".whl"
}

// Project is the PEP 503 normalized project name.
func (f Filename) Project() string { return NormalizeName(f.Name) }

// NormalizeName is the PEP 503 normalized form of a project name: lower case, runs of
// "-", "_" and "." replaced by one "-".
func NormalizeName(name string) string { return pep508.NormalizeName(name) }

// TagTriples expands the compressed tag sets into every python-abi-platform triple, in
// file order (python, then abi, then platform), without duplicates.
func (f Filename) TagTriples() [][3]string {
	var out [][3]string
	seen := map[[3]string]bool{}
	for _, py := range f.Python {
		for _, abi := range f.ABI {
			for _, plat := range f.Platform {
				t := [3]string{py, abi, plat}
				if !seen[t] {
					seen[t] = true
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// sdistExtensions are the archive extensions pip accepts for source distributions.
var sdistExtensions = []string{
	".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma", ".tar", ".zip",
}

// IsSdistFilename reports whether s names a source distribution archive (as pip
// recognises them: .tar.gz, .tgz, .tar.bz2, .tbz, .tar.xz, .txz, .tlz, .tar.lz,
// .tar.lzma, .tar, .zip; case-insensitive). Paths and empty stems are not file names.
func IsSdistFilename(s string) bool {
	if strings.ContainsAny(s, "/\\\x00") {
		return false
	}
	l := strings.ToLower(s)
	for _, ext := range sdistExtensions {
		if stem, ok := strings.CutSuffix(l, ext); ok {
			return stem != "" && stem != "."
		}
	}
	return false
}
