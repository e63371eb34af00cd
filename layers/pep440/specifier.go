package pep440

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalidSpecifier is returned (wrapped) for strings that are not PEP 440
// version specifiers.
var ErrInvalidSpecifier = errors.New("invalid PEP 440 specifier")

// Specifier is one clause of a specifier set, e.g. {">=", "1.0"}. Version is
// kept as written (whitespace stripped), as packaging keeps it: "==1.0.*",
// "~=2.2", "===foobar". Build Specifiers with ParseSpecifier; a hand-made
// value that does not parse matches nothing.
type Specifier struct {
	Op      string
	Version string
}

// Operand patterns from packaging 21.3's Specifier._regex_str, one per
// operator family (Go's regexp has no look-behind). Matched against the
// operand with surrounding whitespace stripped.
const (
	opRelease = `v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*`
	opPre     = `(?:[-_\.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_\.]?[0-9]*)?`
	opPost    = `(?:(?:-[0-9]+)|(?:[-_\.]?(?:post|rev|r)[-_\.]?[0-9]*))?`
	opDev     = `(?:[-_\.]?dev[-_\.]?[0-9]*)?`
	opLocal   = `(?:\+[a-z0-9]+(?:[-_\.][a-z0-9]+)*)?`
)

var (
	eqOperandRE     = regexp.MustCompile(`(?i)^` + opRelease + opPre + opPost + `(?:` + opDev + opLocal + `|\.\*)?$`)
	compatOperandRE = regexp.MustCompile(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+` + opPre + opPost + opDev + `$`)
	otherOperandRE  = regexp.MustCompile(`(?i)^` + opRelease + opPre + opPost + opDev + `$`)
)

// operators in the order that makes a longest-prefix match.
var operators = []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"}

// clause is a parsed Specifier.
type clause struct {
	Specifier
	wildcard bool    // "==X.*" or "!=X.*"
	v        Version // parsed operand (without ".*"); unset for "===" unless it parses
	vOK      bool
}

// ParseSpecifier parses one specifier clause such as ">=1.0", "== 1.0.*" or
// "~=2.2". It is packaging's Specifier(s), minus LegacySpecifier.
func ParseSpecifier(s string) (Specifier, error) {
	c, err := parseClause(s)
	return c.Specifier, err
}

func parseClause(s string) (clause, error) {
	t := TrimSpace(s)
	bad := func(why string) (clause, error) {
		return clause{}, fmt.Errorf("parsing specifier %q: %w: %s", s, ErrInvalidSpecifier, why)
	}
	if !isASCII(t) {
		return bad("only ASCII is allowed")
	}
	var op string
	for _, o := range operators {
		if strings.HasPrefix(t, o) {
			op = o
			break
		}
	}
	if op == "" {
		return bad("it must start with one of ~= == != <= >= < > ===")
	}
	ver := TrimSpace(t[len(op):])
	c := clause{Specifier: Specifier{Op: op, Version: ver}}
	switch op {
	case "===":
		if ver == "" {
			return bad("=== needs a version")
		}
		if strings.IndexFunc(ver, IsSpace) >= 0 {
			return bad("the version of === must not contain whitespace")
		}
		c.v, c.vOK = tryParse(ver)
		return c, nil
	case "==", "!=":
		if !eqOperandRE.MatchString(ver) {
			return bad(operandHint(op, ver))
		}
		if strings.HasSuffix(ver, ".*") {
			c.wildcard = true
			ver = ver[:len(ver)-2]
		}
	case "~=":
		if !compatOperandRE.MatchString(ver) {
			return bad(operandHint(op, ver))
		}
	default:
		if !otherOperandRE.MatchString(ver) {
			return bad(operandHint(op, ver))
		}
	}
	v, err := Parse(ver)
	if err != nil {
		return clause{}, fmt.Errorf("parsing specifier %q: %w", s, err)
	}
	c.v, c.vOK = v, true
	return c, nil
}

func tryParse(s string) (Version, bool) {
	v, err := Parse(s)
	return v, err == nil
}

func operandHint(op, ver string) string {
	switch {
	case ver == "":
		return "missing version after " + op
	case op == "~=" && !strings.Contains(ver, "."):
		return "~= needs at least two release numbers, e.g. ~=1.0"
	case strings.HasSuffix(ver, ".*"):
		return op + " does not allow a .* suffix (only == and != do)"
	case strings.Contains(ver, "+") && op != "==" && op != "!=":
		return op + " does not allow a local version (only == and != do)"
	}
	return fmt.Sprintf("%q is not a valid PEP 440 version for %s", ver, op)
}

// String returns Op+Version, like str(packaging Specifier).
func (s Specifier) String() string { return s.Op + s.Version }

// Prereleases reports whether the clause itself admits pre-releases:
// packaging 21.3's Specifier.prereleases without an override, i.e. the
// operator is inclusive (== >= <= ~= ===) and its version is a
// pre-release.
func (s Specifier) Prereleases() bool {
	c, err := parseClause(s.String())
	return err == nil && c.prereleases()
}

// Contains reports whether v satisfies the clause, as packaging's
// Specifier.contains(v, prereleases=prereleases): a pre-release v never
// matches unless prereleases is true.
func (s Specifier) Contains(v Version, prereleases bool) bool {
	c, err := parseClause(s.String())
	return err == nil && c.contains(v, prereleases)
}

func (c clause) prereleases() bool {
	switch c.Op {
	case "==", ">=", "<=", "~=", "===":
		return c.vOK && c.v.IsPrerelease()
	}
	return false
}

func (c clause) contains(v Version, prereleases bool) bool {
	if v.IsPrerelease() && !prereleases {
		return false
	}
	switch c.Op {
	case "~=":
		return c.compatible(v)
	case "==":
		return c.equal(v)
	case "!=":
		return !c.equal(v)
	case "<=":
		return v.withoutLocal().Compare(c.v) <= 0
	case ">=":
		return v.withoutLocal().Compare(c.v) >= 0
	case "<":
		return c.lessThan(v)
	case ">":
		return c.greaterThan(v)
	case "===":
		return strings.EqualFold(v.String(), c.Version) // both ASCII
	}
	return false
}

// compatible implements "~=V" as ">=V" and "==P.*", where P is V's
// release without its last component, computed on the operand text as
// packaging does.
func (c clause) compatible(v Version) bool {
	var keep []string
	for _, seg := range versionSplit(c.Version) {
		if !isNotSuffix(seg) {
			break
		}
		keep = append(keep, seg)
	}
	if len(keep) > 0 {
		keep = keep[:len(keep)-1]
	}
	prefix := clause{Specifier: Specifier{Op: "==", Version: strings.Join(keep, ".") + ".*"}, wildcard: true}
	return v.withoutLocal().Compare(c.v) >= 0 && prefix.equal(v)
}

func (c clause) equal(v Version) bool {
	if !c.wildcard {
		if len(c.v.local) == 0 {
			v = v.withoutLocal()
		}
		return v.Compare(c.v) == 0
	}
	// Prefix match on strings, exactly as packaging 21.3 does it: split
	// both on dots (and between a release number and a pre-release tag),
	// cut the candidate to the operand's length, pad release parts with "0".
	spec := versionSplit(strings.TrimSuffix(c.Version, ".*"))
	cand := versionSplit(v.withoutLocal().String())
	if len(cand) > len(spec) {
		cand = cand[:len(spec)]
	}
	ps, pc := padVersion(spec, cand)
	if len(ps) != len(pc) {
		return false
	}
	for i := range ps {
		if ps[i] != pc[i] {
			return false
		}
	}
	return true
}

// lessThan: v < V, and unless V is itself a pre-release, no pre-release of
// V's own release ("<3.1" excludes "3.1.dev0" but matches "3.0.dev0").
func (c clause) lessThan(v Version) bool {
	if v.Compare(c.v) >= 0 {
		return false
	}
	if !c.v.IsPrerelease() && v.IsPrerelease() && v.base().Equal(c.v.base()) {
		return false
	}
	return true
}

// greaterThan: v > V, and unless V is itself a post-release, no
// post-release of V's release; never a local version of V's release.
func (c clause) greaterThan(v Version) bool {
	if v.Compare(c.v) <= 0 {
		return false
	}
	if !c.v.IsPostRelease() && v.IsPostRelease() && v.base().Equal(c.v.base()) {
		return false
	}
	if len(v.local) > 0 && v.base().Equal(c.v.base()) {
		return false
	}
	return true
}

var prefixRE = regexp.MustCompile(`^([0-9]+)((?:a|b|c|rc)[0-9]+)$`)

// versionSplit is packaging's _version_split.
func versionSplit(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ".") {
		if m := prefixRE.FindStringSubmatch(item); m != nil {
			out = append(out, m[1], m[2])
		} else {
			out = append(out, item)
		}
	}
	return out
}

// isNotSuffix is packaging's _is_not_suffix.
func isNotSuffix(seg string) bool {
	for _, p := range []string{"dev", "a", "b", "rc", "post"} {
		if strings.HasPrefix(seg, p) {
			return false
		}
	}
	return true
}

// padVersion is packaging's _pad_version.
func padVersion(left, right []string) ([]string, []string) {
	lr, rr := leadingDigits(left), leadingDigits(right)
	pad := func(n int) []string {
		var z []string
		for ; n > 0; n-- {
			z = append(z, "0")
		}
		return z
	}
	l := append(append(append([]string{}, left[:lr]...), pad(rr-lr)...), left[lr:]...)
	r := append(append(append([]string{}, right[:rr]...), pad(lr-rr)...), right[rr:]...)
	return l, r
}

func leadingDigits(s []string) int {
	n := 0
	for n < len(s) && isDigits(s[n]) {
		n++
	}
	return n
}
