package pep440

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
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

// Operand patterns of packaging 26.2's Specifier regex, one per operator
// family. Matched against the operand with surrounding whitespace stripped.
// "==" and "!=" take either a ".*" suffix or pre/post/dev/local segments,
// never both ("==1.0a1.*" is invalid since packaging 22.0).
const (
	opRelease = `v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*`
	opPre     = `(?:[-_\.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_\.]?[0-9]*)?`
	opPost    = `(?:(?:-[0-9]+)|(?:[-_\.]?(?:post|rev|r)[-_\.]?[0-9]*))?`
	opDev     = `(?:[-_\.]?dev[-_\.]?[0-9]*)?`
	opLocal   = `(?:\+[a-z0-9]+(?:[-_\.][a-z0-9]+)*)?`
)

var (
	eqOperandRE     = lazyre.New(`(?i)^` + opRelease + `(?:\.\*|` + opPre + opPost + opDev + opLocal + `)$`)
	compatOperandRE = lazyre.New(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+` + opPre + opPost + opDev + `$`)
	otherOperandRE  = lazyre.New(`(?i)^` + opRelease + opPre + opPost + opDev + `$`)
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
// "~=2.2". It is packaging 26.2's Specifier(s).
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
		if strings.IndexFunc(ver, IsSpace) >= 0 || strings.ContainsAny(ver, ";)") {
			return bad("the version of === must not contain whitespace, ';' or ')'")
		}
		c.v, c.vOK = tryParse(ver)
		return c, nil
	case "==", "!=":
		if !eqOperandRE().MatchString(ver) {
			return bad(operandHint(op, ver))
		}
		if strings.HasSuffix(ver, ".*") {
			c.wildcard = true
			ver = ver[:len(ver)-2]
		}
	case "~=":
		if !compatOperandRE().MatchString(ver) {
			return bad(operandHint(op, ver))
		}
	default:
		if !otherOperandRE().MatchString(ver) {
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
	case strings.HasSuffix(ver, ".*") && (op == "==" || op == "!="):
		return "a .* suffix cannot follow a pre, post, dev or local segment"
	case strings.HasSuffix(ver, ".*"):
		return op + " does not allow a .* suffix (only == and != do)"
	case strings.Contains(ver, "+") && op != "==" && op != "!=":
		return op + " does not allow a local version (only == and != do)"
	}
	return fmt.Sprintf("%q is not a valid PEP 440 version for %s", ver, op)
}

// String returns Op+Version, like str(packaging Specifier).
func (s Specifier) String() string { return s.Op + s.Version }

// Prereleases reports whether the clause itself admits pre-releases, as
// packaging 26.2's Specifier.prereleases without an override: its version is
// a pre-release, for every operator but "!=" and "==X.*" (since packaging
// 24.2 this includes "<" and ">": ">1.0.dev1" admits "1.0").
func (s Specifier) Prereleases() bool {
	c, err := parseClause(s.String())
	return err == nil && c.prereleases()
}

// Contains reports whether v satisfies the clause, as packaging's
// Specifier.contains(v, prereleases=prereleases): a pre-release v never
// matches unless prereleases is true. (packaging 26.2's default,
// prereleases=None, is Contains(v, true) for a single version.)
func (s Specifier) Contains(v Version, prereleases bool) bool {
	c, err := parseClause(s.String())
	return err == nil && c.contains(v, prereleases)
}

func (c clause) prereleases() bool {
	switch {
	case c.Op == "!=", c.wildcard:
		return false
	}
	return c.vOK && c.v.IsPrerelease()
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

// compatible implements "~=V" as ">=V" and "==P.*", where P is V's text
// split as packaging 26.2 splits it (epoch first, "1rc1" as "1", "rc1"), cut
// before its first pre, post or dev segment, without its last part. Since
// packaging 22.0 the prefix is compared on parsed versions, so
// "~=2022.01.01" contains "2022.1.1".
func (c clause) compatible(v Version) bool {
	if v.withoutLocal().Compare(c.v) < 0 {
		return false
	}
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
	if len(keep) == 0 {
		return prefixMatch(v, "")
	}
	return prefixMatch(v, keep[0]+"!"+strings.Join(keep[1:], "."))
}

func (c clause) equal(v Version) bool {
	if !c.wildcard {
		if len(c.v.local) == 0 {
			v = v.withoutLocal()
		}
		return v.Compare(c.v) == 0
	}
	return prefixMatch(v, strings.TrimSuffix(c.Version, ".*"))
}

// prefixMatch is "==P.*" as packaging 26.2 computes it: P normalized (when
// it is a version), split into epoch and parts; v without its local segment,
// split the same way, padded with zero release parts to P's number of
// numeric parts and cut to P's length, must equal it. So "==2022.01.*"
// contains "2022.1.3", "==0!2.*" contains "2" and "==2!1.0.0.0.*" contains
// "2!1.0.0"; pre, post and dev segments of v beyond P do not matter.
func prefixMatch(v Version, p string) bool {
	if pv, err := Parse(p); err == nil {
		p = pv.String()
	}
	spec := versionSplit(p)
	cand := versionSplit(v.withoutLocal().String())
	if n, m := numericLen(cand), numericLen(spec); n < m {
		pad := make([]string, 0, len(cand)+m-n)
		pad = append(pad, cand[:n]...)
		for ; n < m; n++ {
			pad = append(pad, "0")
		}
		cand = append(pad, cand[numericLen(cand):]...)
	}
	if len(cand) > len(spec) {
		cand = cand[:len(spec)]
	}
	if len(cand) != len(spec) {
		return false
	}
	for i := range spec {
		if cand[i] != spec[i] {
			return false
		}
	}
	return true
}

var prefixRE = lazyre.New(`^([0-9]+)((?:a|b|c|rc)[0-9]+)$`)

// versionSplit is packaging 26.2's _version_split: the epoch ("0" when
// absent), then the dot-separated parts, "1rc1" counted as "1", "rc1".
func versionSplit(s string) []string {
	epoch, rest := "0", s
	if i := strings.LastIndexByte(s, '!'); i >= 0 {
		if s[:i] != "" {
			epoch = s[:i]
		}
		rest = s[i+1:]
	}
	out := []string{epoch}
	for _, item := range strings.Split(rest, ".") {
		if m := prefixRE().FindStringSubmatch(item); m != nil {
			out = append(out, m[1], m[2])
		} else {
			out = append(out, item)
		}
	}
	return out
}

// isNotSuffix is packaging's _is_not_suffix (case-sensitive, as there).
func isNotSuffix(seg string) bool {
	for _, p := range []string{"dev", "a", "b", "rc", "post"} {
		if strings.HasPrefix(seg, p) {
			return false
		}
	}
	return true
}

func numericLen(parts []string) int {
	n := 0
	for n < len(parts) && isDigits(parts[n]) {
		n++
	}
	return n
}

// lessThan: v < V and, unless V is itself a pre-release, v is no pre-release
// at or above V's earliest pre-release (V with .dev0). Since packaging 26.1
// "<1.0.post1" admits "1.0a1" (but not "1.0.post1.dev0"); "<3.1" excludes
// "3.1.dev0" and admits "3.0.dev0".
func (c clause) lessThan(v Version) bool {
	if v.Compare(c.v) >= 0 {
		return false
	}
	if !c.v.IsPrerelease() && v.IsPrerelease() {
		earliest := c.v.withoutLocal()
		earliest.dev = 0
		if v.Compare(earliest) >= 0 {
			return false
		}
	}
	return true
}

// greaterThan: v > V, unless V is no post-release and v is a post-release
// of exactly V (">1.0" excludes "1.0.post1"; since packaging 26.1 ">1.0a1"
// admits "1.0.post1"), or v is a local version of exactly V (">1.0.dev1"
// excludes "1.0.dev1+x" and, since packaging 26.1, admits "1.0+x").
func (c clause) greaterThan(v Version) bool {
	if v.Compare(c.v) <= 0 {
		return false
	}
	if !c.v.IsPostRelease() && v.IsPostRelease() {
		pb := v.withoutLocal()
		pb.post, pb.dev = -1, -1
		if pb.Equal(c.v) {
			return false
		}
	}
	if len(v.local) > 0 && v.withoutLocal().Equal(c.v) {
		return false
	}
	return true
}
