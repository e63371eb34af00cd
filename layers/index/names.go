package index

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// ErrNotFound reports that the index has no page for a project.
var ErrNotFound = errors.New("project not found on the index")

// ErrHashMismatch reports that downloaded bytes do not have the sha256 the
// index promised.
var ErrHashMismatch = errors.New("sha256 mismatch")

// ErrSizeMismatch reports that a download's length differs from the size the
// index promised.
var ErrSizeMismatch = errors.New("size mismatch")

// ErrInvalidName reports a project name that is not a valid Python
// distribution name (PEP 508).
var ErrInvalidName = errors.New("invalid project name")

// ErrNoHash reports a file that cannot be verified because the index gave no
// (usable) sha256 for it.
var ErrNoHash = errors.New("no sha256 hash from the index")

var (
	validNameRe = lazyre.New(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9])$`)
	separatorRe = lazyre.New(`[-_.]+`)
	sha256HexRe = lazyre.New(`^[0-9a-f]{64}$`)
)

// Normalize returns the PEP 503 normalized form of a project name: lower
// case, every run of "-", "_" and "." replaced by a single "-".
func Normalize(name string) string {
	return strings.ToLower(separatorRe().ReplaceAllString(name, "-"))
}

// ValidName reports whether name is a valid distribution name (PEP 508).
func ValidName(name string) bool {
	return len(name) <= 200 && validNameRe().MatchString(name)
}

func checkName(name string) error {
	if !ValidName(name) {
		return fmt.Errorf("%w: %q (letters, digits, '-', '_' and '.', starting and ending with a letter or digit)", ErrInvalidName, name)
	}
	return nil
}

// distKind is the kind of a distribution file, judged by its name.
type distKind int

const (
	kindNone distKind = iota
	kindWheel
	kindSdist
)

// parseDistFilename returns the normalized project name and the version of a
// distribution file name: a wheel "name-ver(-build)?-py-abi-plat.whl" or an
// sdist "name-ver.tar.gz" / "name-ver.zip" (split at the last '-').
func parseDistFilename(fn string) (project, version string, kind distKind, ok bool) {
	var name string
	switch {
	case strings.HasSuffix(fn, ".whl"):
		parts := strings.Split(strings.TrimSuffix(fn, ".whl"), "-")
		if len(parts) != 5 && len(parts) != 6 {
			return "", "", kindNone, false
		}
		for _, p := range parts {
			if p == "" {
				return "", "", kindNone, false
			}
		}
		name, version, kind = parts[0], parts[1], kindWheel
	case strings.HasSuffix(fn, ".tar.gz"), strings.HasSuffix(fn, ".zip"):
		stem := strings.TrimSuffix(strings.TrimSuffix(fn, ".tar.gz"), ".zip")
		i := strings.LastIndexByte(stem, '-')
		if i <= 0 || i == len(stem)-1 {
			return "", "", kindNone, false
		}
		name, version, kind = stem[:i], stem[i+1:], kindSdist
	default:
		return "", "", kindNone, false
	}
	if !ValidName(name) || strings.ContainsAny(version, "/\\\x00 ") {
		return "", "", kindNone, false
	}
	return Normalize(name), version, kind, true
}

// safeFilename reports whether fn can be used as a single path element.
func safeFilename(fn string) bool {
	return fn != "" && fn != "." && fn != ".." && len(fn) <= 255 &&
		!strings.ContainsAny(fn, "/\\\x00") && !strings.Contains(fn, "..")
}
