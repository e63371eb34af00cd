package pep440

import (
	"fmt"
	"sort"
	"strings"
)

// SpecifierSet is a conjunction of specifier clauses, packaging 26.2's
// SpecifierSet without a prereleases override. The zero value is the empty
// set, which matches every version. Clauses are deduplicated only when they
// mean the same (">=1.0" and ">=1.0.0"); distinct clauses are never merged,
// so "~=1.18,~=1.18.0" keeps both.
type SpecifierSet struct {
	clauses []clause // deduplicated; of equal clauses the one whose String sorts first
}

// ParseSpecifierSet parses a comma-separated list of clauses. Whitespace
// around clauses is ignored and empty clauses are skipped, so "" is the
// empty set. Every clause must be a valid PEP 440 specifier.
func ParseSpecifierSet(s string) (SpecifierSet, error) {
	var set SpecifierSet
	for i, part := range strings.Split(s, ",") {
		if TrimSpace(part) == "" {
			continue
		}
		c, err := parseClause(part)
		if err != nil {
			return SpecifierSet{}, fmt.Errorf("parsing specifier set %q, clause %d: %w", s, i+1, err)
		}
		set.clauses = addClause(set.clauses, c)
	}
	return set, nil
}

// MustParseSpecifierSet is ParseSpecifierSet that panics on error.
func MustParseSpecifierSet(s string) SpecifierSet {
	set, err := ParseSpecifierSet(s)
	if err != nil {
		panic(err)
	}
	return set
}

// canonicalKey is packaging 26.2's Specifier._canonical_spec, which decides
// which clauses a set treats as duplicates: ">=1.0" and ">=1.0.0" are one,
// but "~=1.0" and "~=1.0.0" are two (the trailing zero of a "~=" operand
// changes its meaning), and "===" and ".*" operands compare as written.
func (c clause) canonicalKey() string {
	v := c.Version
	switch {
	case c.Op == "===" || c.wildcard || !c.vOK:
	case c.Op == "~=":
		v = c.v.String()
	default:
		v = canonicalVersion(c.v)
	}
	return c.Op + "\x00" + v
}

// canonicalVersion is packaging's utils.canonicalize_version: String() with
// trailing ".0" release components removed.
func canonicalVersion(v Version) string {
	r := v.release
	for len(r) > 1 && r[len(r)-1] == 0 {
		r = r[:len(r)-1]
	}
	v.release = r
	return v.String()
}

func addClause(cs []clause, c clause) []clause {
	k := c.canonicalKey()
	for i, old := range cs {
		if old.canonicalKey() == k {
			if c.String() < old.String() {
				cs[i] = c
			}
			return cs
		}
	}
	return append(cs, c)
}

// String is str(packaging SpecifierSet): the clauses' strings sorted and
// joined with ",".
func (s SpecifierSet) String() string {
	strs := make([]string, len(s.clauses))
	for i, c := range s.clauses {
		strs[i] = c.String()
	}
	sort.Strings(strs)
	return strings.Join(strs, ",")
}

// Clauses returns the clauses in String order.
func (s SpecifierSet) Clauses() []Specifier {
	out := make([]Specifier, len(s.clauses))
	for i, c := range s.clauses {
		out[i] = c.Specifier
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// IsEmpty reports whether the set has no clauses.
func (s SpecifierSet) IsEmpty() bool { return len(s.clauses) == 0 }

// And returns the intersection of s and o (packaging's s & o): the union of
// their clauses, deduplicated as ParseSpecifierSet does. Every distinct
// clause of either set stays a constraint of the result.
func (s SpecifierSet) And(o SpecifierSet) SpecifierSet {
	out := append([]clause(nil), s.clauses...)
	for _, c := range o.clauses {
		out = addClause(out, c)
	}
	return SpecifierSet{clauses: out}
}

// Prereleases is packaging 26.2's SpecifierSet.prereleases without an
// override: true iff some clause admits pre-releases (see
// Specifier.Prereleases). False stands for packaging's None: the empty set,
// and a set none of whose clauses names a pre-release.
func (s SpecifierSet) Prereleases() bool {
	for _, c := range s.clauses {
		if c.prereleases() {
			return true
		}
	}
	return false
}

// Contains is packaging's SpecifierSet.contains(v, prereleases): a
// pre-release v is rejected unless prereleases is true, then every clause
// must match. packaging 26.2's default (prereleases=None) checks one version
// as Filter does, which admits a matching pre-release: it is
// Contains(v, true).
func (s SpecifierSet) Contains(v Version, prereleases bool) bool {
	if v.IsPrerelease() && !prereleases {
		return false
	}
	for _, c := range s.clauses {
		if !c.contains(v, prereleases) {
			return false
		}
	}
	return true
}

// Filter is packaging 26.2's SpecifierSet.filter, keeping the input order.
// A nil prereleases means "not forced" (packaging's None): it becomes true
// when s.Prereleases(), else the versions every clause matches are kept,
// pre-releases included, and then the pre-releases are dropped if at least
// one final release matched (PEP 440's fallback, since packaging 26.0 for
// every set: ">=1.0" filters ["2.0a1"] to ["2.0a1"]). A non-nil prereleases
// keeps or drops every pre-release.
func (s SpecifierSet) Filter(vs []Version, prereleases *bool) []Version {
	if prereleases == nil && s.Prereleases() {
		t := true
		prereleases = &t
	}
	allow := prereleases == nil || *prereleases
	matched := []Version{}
	final := false
	for _, v := range vs {
		if s.Contains(v, allow) {
			matched = append(matched, v)
			final = final || !v.IsPrerelease()
		}
	}
	if prereleases != nil || !final {
		return matched
	}
	out := matched[:0]
	for _, v := range matched {
		if !v.IsPrerelease() {
			out = append(out, v)
		}
	}
	return out
}

// IsPinned reports whether some clause pins one version: "===" anything or
// "==" without ".*" (pip's resolvelib factory is_pinned, which makes the
// resolver accept pre-releases for that requirement).
func (s SpecifierSet) IsPinned() bool {
	for _, c := range s.clauses {
		if c.Op == "===" || (c.Op == "==" && !c.wildcard) {
			return true
		}
	}
	return false
}

// MarshalText implements encoding.TextMarshaler with String.
func (s SpecifierSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSpecifierSet.
func (s *SpecifierSet) UnmarshalText(b []byte) error {
	p, err := ParseSpecifierSet(string(b))
	if err != nil {
		return err
	}
	*s = p
	return nil
}
