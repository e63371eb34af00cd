package pep508

import (
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

var (
	validName = lazyre.New(`^(?i:[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$`)
)

// NormalizeName is PEP 503 name normalization (packaging's
// canonicalize_name): runs of "-", "_" and "." become one "-", and the
// result is lower case. PEP 685 applies the same rule to extras.
//
// It is written out, not a regular expression: every run normalizes each name of its
// layers' locks, and compiling and matching the pattern `[-_.]+` was most of that
// (FuzzNormalizeName holds it to the pattern).
func NormalizeName(s string) string {
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		c := s[i]
		clean = c != '_' && c != '.' && (c < 'A' || c > 'Z') && c < 0x80 && (c != '-' || (i > 0 && s[i-1] != '-'))
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	sep := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '-', '_', '.':
			sep = true
		default:
			if sep {
				b.WriteByte('-')
				sep = false
			}
			b.WriteByte(c)
		}
	}
	if sep {
		b.WriteByte('-')
	}
	return strings.ToLower(b.String())
}

// ValidName reports whether s is a valid distribution name under PEP 508:
// ASCII letters and digits, with ".", "-" or "_" only between them.
func ValidName(s string) bool { return validName().MatchString(s) }
