package pep440

// A model of packaging 21.3 (pip 23's vendored copy, the oracle), kept only
// to prove that where this package and the oracle disagree, the oracle
// answers as 21.3's documented rules do, and the difference is one of the
// changes packaging made up to 26.2 (named in oracle_test.go). It is this
// package's own former implementation.

import (
	"regexp"
	"sort"
	"strings"
)

var eqOperandRE213 = regexp.MustCompile(`(?i)^` + opRelease + opPre + opPost + `(?:` + opDev + opLocal + `|\.\*)?$`)

func legacyContains(c clause, v Version, prereleases bool) bool {
	if v.IsPrerelease() && !prereleases {
		return false
	}
	switch c.Op {
	case "~=":
		return legacyCompatible(c, v)
	case "==":
		return legacyEqual(c, v)
	case "!=":
		return !legacyEqual(c, v)
	case "<":
		return legacyLessThan(c, v)
	case ">":
		return legacyGreaterThan(c, v)
	}
	return c.contains(v, prereleases)
}

func legacyPrereleases(c clause) bool {
	switch c.Op {
	case "==", ">=", "<=", "~=", "===":
		return c.vOK && c.v.IsPrerelease()
	}
	return false
}

func legacySetPrereleases(s SpecifierSet) bool {
	for _, c := range s.clauses {
		if legacyPrereleases(c) {
			return true
		}
	}
	return false
}

func legacySetContains(s SpecifierSet, v Version, prereleases bool) bool {
	if v.IsPrerelease() && !prereleases {
		return false
	}
	for _, c := range legacyClauses(s) {
		if !legacyContains(c, v, prereleases) {
			return false
		}
	}
	return true
}

// legacyClauses dedupes as 21.3 does: "~=1.0" and "~=1.0.0" are one clause.
func legacyClauses(s SpecifierSet) []clause {
	var out []clause
	for _, c := range s.clauses {
		k := legacyKey(c)
		dup := false
		for _, o := range out {
			dup = dup || legacyKey(o) == k
		}
		if !dup {
			out = append(out, c)
		}
	}
	return out
}

func legacyKey(c clause) string {
	v := c.Version
	if !c.wildcard && c.vOK {
		v = canonicalVersion(c.v)
	}
	return c.Op + "\x00" + v
}

// legacyString is str(SpecifierSet(raw)) in 21.3: of equal clauses the
// first spelling stays.
func legacyString(raw string) string {
	var cs []clause
	for _, part := range strings.Split(raw, ",") {
		if c, err := parseClause(part); err == nil {
			cs = append(cs, c)
		}
	}
	var strs []string
	for _, c := range legacyClauses(SpecifierSet{clauses: cs}) {
		strs = append(strs, c.String())
	}
	sort.Strings(strs)
	return strings.Join(strs, ",")
}

func legacyFilter(s SpecifierSet, vs []Version, prereleases *bool) []Version {
	out := []Version{}
	if len(s.clauses) > 0 {
		pre := legacySetPrereleases(s)
		if prereleases != nil {
			pre = *prereleases
		}
		for _, v := range vs {
			if legacySetContains(s, v, pre) {
				out = append(out, v)
			}
		}
		return out
	}
	return s.Filter(vs, prereleases)
}

func legacyCompatible(c clause, v Version) bool {
	var keep []string
	for _, seg := range legacySplit(c.Version) {
		if !legacyIsNotSuffix(seg) {
			break
		}
		keep = append(keep, seg)
	}
	if len(keep) > 0 {
		keep = keep[:len(keep)-1]
	}
	prefix := clause{Specifier: Specifier{Op: "==", Version: strings.Join(keep, ".") + ".*"}, wildcard: true}
	return v.withoutLocal().Compare(c.v) >= 0 && legacyEqual(prefix, v)
}

func legacyEqual(c clause, v Version) bool {
	if !c.wildcard {
		if len(c.v.local) == 0 {
			v = v.withoutLocal()
		}
		return v.Compare(c.v) == 0
	}
	// Prefix match on strings, exactly as packaging 21.3 does it: split
	// both on dots (and between a release number and a pre-release tag),
	// cut the candidate to the operand's length, pad release parts with "0".
	spec := legacySplit(strings.TrimSuffix(c.Version, ".*"))
	cand := legacySplit(v.withoutLocal().String())
	if len(cand) > len(spec) {
		cand = cand[:len(spec)]
	}
	ps, pc := legacyPad(spec, cand)
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
func legacyLessThan(c clause, v Version) bool {
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
func legacyGreaterThan(c clause, v Version) bool {
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

var legacyPrefixRE = regexp.MustCompile(`^([0-9]+)((?:a|b|c|rc)[0-9]+)$`)

// legacySplit is packaging's _version_split.
func legacySplit(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ".") {
		if m := legacyPrefixRE.FindStringSubmatch(item); m != nil {
			out = append(out, m[1], m[2])
		} else {
			out = append(out, item)
		}
	}
	return out
}

// legacyIsNotSuffix is packaging's _is_not_suffix.
func legacyIsNotSuffix(seg string) bool {
	for _, p := range []string{"dev", "a", "b", "rc", "post"} {
		if strings.HasPrefix(seg, p) {
			return false
		}
	}
	return true
}

// legacyPad is packaging's _pad_version.
func legacyPad(left, right []string) ([]string, []string) {
	lr, rr := legacyLeadingDigits(left), legacyLeadingDigits(right)
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

func legacyLeadingDigits(s []string) int {
	n := 0
	for n < len(s) && isDigits(s[n]) {
		n++
	}
	return n
}

// The changes from packaging 21.3 to 26.2 that make this package answer
// differently from the oracle.
const (
	changeParsedPrefix     = "packaging 22.0 (#561, #563), 23.1 (#674), 24.0 (#683): wildcard and ~= compared on parsed versions, epochs and zeros included"
	changePreOperand       = "packaging 24.2 (#794): a pre-release operand of < or > admits pre-releases"
	changeFallback         = "packaging 26.0 (#897, #942): contains and filter with prereleases=None fall back to pre-releases when no final release matches"
	changeLessPost         = "packaging 26.1 (#1140): <V.postN excludes only pre-releases of V.postN"
	changeGreater          = "packaging 26.1 (#1141, #1097): >V excludes only post-releases and local versions of exactly V"
	changeCompatDedupe     = "packaging 22.0 (#493), 26.1 (#1109): ~=1.0 and ~=1.0.0 are distinct clauses, never merged"
	changeSortedDedupe     = "packaging 26.1 (#1109): of equal clauses the spelling that sorts first is kept"
	changeArbitraryDedupe  = "packaging 26.0 (#951): === clauses are never merged"
	changeNoWildcardSuffix = "packaging 22.0 (#563): no .* after a pre, post or dev segment"
)

func validIn213(s string) bool {
	for _, part := range strings.Split(s, ",") {
		p := TrimSpace(part)
		for _, op := range []string{"==", "!="} {
			if strings.HasPrefix(p, op) && !strings.HasPrefix(p, "===") && eqOperandRE213.MatchString(TrimSpace(p[2:])) {
				if _, err := ParseSpecifier(p); err != nil {
					return true
				}
			}
		}
	}
	return false
}

// changes lists the reasons our answer for set on vs (with prereleases pre)
// may differ from 21.3's: a clause whose own answer changed, a changed
// pre-release default, the fallback, a ~= clause 21.3 merged away.
func changes(set SpecifierSet, vs []Version, pre tri) []string {
	var out []string
	seen := map[string]bool{}
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, v := range vs {
		for _, c := range set.clauses {
			if c.contains(v, true) == legacyContains(c, v, true) {
				continue
			}
			switch {
			case c.Op == "~=" || c.wildcard:
				add(changeParsedPrefix)
			case c.Op == "<":
				add(changeLessPost)
			case c.Op == ">":
				add(changeGreater)
			}
		}
	}
	for _, r := range changesDedupe(set) {
		add(r)
	}
	if pre == none {
		if set.Prereleases() != legacySetPrereleases(set) {
			add(changePreOperand)
		}
		add(changeFallback)
	}
	return out
}

func changesDedupe(set SpecifierSet) []string {
	if len(legacyClauses(set)) == len(set.clauses) {
		return nil
	}
	for _, c := range set.clauses {
		if c.Op == "===" {
			return []string{changeArbitraryDedupe}
		}
	}
	return []string{changeCompatDedupe}
}

func changesString(raw string, set SpecifierSet) []string {
	out := changesDedupe(set)
	n := 0
	for _, part := range strings.Split(raw, ",") {
		if TrimSpace(part) != "" {
			n++
		}
	}
	if n != len(set.clauses) {
		out = append(out, changeSortedDedupe)
	}
	return out
}

func changesPre(set SpecifierSet) []string {
	for _, c := range set.clauses {
		if c.prereleases() != legacyPrereleases(c) && (c.Op == "<" || c.Op == ">") {
			return []string{changePreOperand}
		}
	}
	return nil
}
