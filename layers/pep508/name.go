package pep508

import (
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

var (
	separatorRun = lazyre.New(`[-_.]+`)
	validName    = lazyre.New(`^(?i:[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$`)
)

// NormalizeName is PEP 503 name normalization (packaging's
// canonicalize_name): runs of "-", "_" and "." become one "-", and the
// result is lower case. PEP 685 applies the same rule to extras.
func NormalizeName(s string) string {
	return strings.ToLower(separatorRun().ReplaceAllString(s, "-"))
}

// ValidName reports whether s is a valid distribution name under PEP 508:
// ASCII letters and digits, with ".", "-" or "_" only between them.
func ValidName(s string) bool { return validName().MatchString(s) }
