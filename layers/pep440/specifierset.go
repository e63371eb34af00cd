package pep440

import (
	"fmt"
	"sort"
	"strings"
)

// SpecifierSet is a conjunction of specifier clauses, packaging's
// SpecifierSet without a prereleases override. The zero value is the empty
// set, which matches every final release.
type SpecifierSet struct {
	clauses []clause // deduplicated, first spelling wins
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

// canonicalKey is packaging's Specifier._canonical_spec, which decides
// which clauses a set treats as duplicates: ">=1.0" and ">=1.0.0" are one.
func (c clause) canonicalKey() string {
	v := c.Version
	if !c.wildcard && c.vOK {
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
	for _, old := range cs {
		if old.canonicalKey() == k {
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
// their clauses, deduplicated, s's spelling winning.
func (s SpecifierSet) And(o SpecifierSet) SpecifierSet {
	out := append([]clause(nil), s.clauses...)
	for _, c := range o.clauses {
		out = addClause(out, c)
	}
	return SpecifierSet{clauses: out}
}

// Prereleases is packaging's SpecifierSet.prereleases without an override:
// true iff some clause admits pre-releases (see Specifier.Prereleases).
// The empty set reports false (packaging: None).
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
// must match. packaging's default (prereleases=None) is
// Contains(v, s.Prereleases()).
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

// Filter is packaging 21.3's SpecifierSet.filter, keeping the input order.
// A nil prereleases means "not forced" (packaging's None) and resolves to
// s.Prereleases(). Then:
//   - a non-empty set returns the versions Contains accepts; note that
//     packaging 21.3 has NO pre-release fallback here: ">=1.0" filters
//     ["2.0a1"] to nothing;
//   - the empty set drops pre-releases unless they are allowed, but when
//     prereleases is nil and only pre-releases were given, it returns those
//     seen before the first final release (in practice: all of them).
func (s SpecifierSet) Filter(vs []Version, prereleases *bool) []Version {
	out := []Version{}
	if len(s.clauses) > 0 {
		pre := s.Prereleases()
		if prereleases != nil {
			pre = *prereleases
		}
		for _, v := range vs {
			if s.Contains(v, pre) {
				out = append(out, v)
			}
		}
		return out
	}
	allow := prereleases != nil && *prereleases
	var found []Version
	for _, v := range vs {
		if v.IsPrerelease() && !allow {
			if len(out) == 0 {
				found = append(found, v)
			}
			continue
		}
		out = append(out, v)
	}
	if len(out) == 0 && len(found) > 0 && prereleases == nil {
		return found
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
