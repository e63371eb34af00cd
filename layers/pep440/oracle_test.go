package pep440

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/internal/pyoracle"
)

// The oracle is pip 23's vendored packaging 21.3. Tests fail, never skip,
// when it is missing. This package follows packaging 26.2 (pip 26.1-26.2):
// where 21.3 answers differently, 26.2 wins, and the test requires that the
// oracle's answer is what 21.3's rules (legacy213_test.go) give and that the
// difference is one of the changes listed in change213.
const oracleScript = `
from pip._vendor.packaging.version import Version, InvalidVersion
from pip._vendor.packaging.specifiers import SpecifierSet, Specifier, InvalidSpecifier
out = {"versions": [], "specs": []}
valid = []
for s in inp["versions"]:
    try:
        v = Version(s)
    except InvalidVersion:
        out["versions"].append(None)
        continue
    valid.append(v)
    out["versions"].append({"str": str(v), "pre": v.is_prerelease, "post": v.is_postrelease,
        "dev": v.is_devrelease, "public": v.public, "local": v.local or "",
        "release": list(v.release), "epoch": v.epoch, "base": v.base_version})
keys = sorted(set(v._key for v in valid))
rank = {k: i for i, k in enumerate(keys)}
out["ranks"] = [rank[Version(s)._key] if r is not None else -1 for s, r in zip(inp["versions"], out["versions"])]
pool = [Version(p) for p in inp["pool"]]
for s in inp["specs"]:
    try:
        ss = SpecifierSet(s)
        for c in ss:
            if not isinstance(c, Specifier):
                raise InvalidSpecifier("legacy")
    except InvalidSpecifier:
        out["specs"].append(None)
        continue
    r = {"str": str(ss), "prereleases": bool(ss.prereleases), "pinned": any(
            c.operator == "===" or (c.operator == "==" and not c.version.endswith(".*")) for c in ss)}
    for name, pre in (("none", None), ("true", True), ("false", False)):
        r["contains_" + name] = [ss.contains(v, prereleases=pre) for v in pool]
        r["filter_" + name] = [str(v) for v in ss.filter(pool, prereleases=pre)]
        only_pre = [v for v in pool if v.is_prerelease]
        r["filterpre_" + name] = [str(v) for v in ss.filter(only_pre, prereleases=pre)]
    out["specs"].append(r)
`

func genVersions(r *rand.Rand, n int) []string {
	pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
	var out []string
	for len(out) < n {
		s := pick("", "", "", "1!", "0!", "2!") +
			pick("0", "1", "1.0", "1.0.0", "2.1", "1.1", "10.20.30", "01.2", "1.0.0.0", "2", "3.10") +
			pick("", "", "", "a", "a1", "b2", "rc1", "c3", "alpha4", "beta", "pre1", "preview2", "-a1", ".rc.2", "_b_3", "RC1") +
			pick("", "", "", ".post1", "-1", "post", ".rev2", "r3", "_post_4", "-post5", ".POST0") +
			pick("", "", "", ".dev0", "dev", "-dev1", ".dev2", "DEV3") +
			pick("", "", "", "", "+abc", "+1.2", "+ubuntu-1", "+ABC.01", "+1", "+abc.5", "+0")
		if r.Intn(10) == 0 {
			s = pick("v", "V", " ", "\t") + s + pick("", " ", "\n")
		}
		out = append(out, s)
	}
	// Invalid or legacy strings.
	return append(out, "", "1.0-", "1..0", "a1", "1.0+", "1.0+a..b", "1.0.x", "1.0abc", "foo", "1.0-dev",
		"1.0 a1", "1!", "!1.0", "1.0_", "v", "1.0+a_b-c.d", "1.0-0", "1.0.post", "1.0-r1", "1.0c", "1.0preview",
		"٣.1", "1.0+ſ", "99999999999999999999.0")
}

func genSpecs(r *rand.Rand) []string {
	ops := []string{"==", "!=", "<=", ">=", "<", ">", "~=", "==="}
	vers := []string{"1.0", "1", "1.0.0", "2.1", "1.0a1", "1.0.dev1", "1.0.post1", "1.0+local", "1.0.*", "1.*",
		"1.0a1.*", "2.0rc1", "v1.0", "1!1.0", "1.0.0.*", "01.0.*", "1.0-1", "1.0RC1", "2.2.0", "1.1.post1.dev2", "0"}
	var single []string
	for _, op := range ops {
		for _, v := range vers {
			single = append(single, op+v)
		}
	}
	out := append([]string{"", " ", ",", ">=1.0,", " >= 1.0 , < 2.0 ", "~=1", "~=1.*", ">=1.0+abc", "<1.0.*",
		"=1.0", "=>1.0", "==1.0abc", "==foo", "===foo", "=== 1.0", ">=1.0,>=1.0.0", "==1.0,==1.0.0,==1", "===1.0,===1.0.0",
		">1.0,<2.0,!=1.5.*", "~=1.0,~=1.0.0"}, single...)
	for i := 0; i < 120; i++ {
		out = append(out, single[r.Intn(len(single))]+","+single[r.Intn(len(single))])
	}
	return out
}

var pool = []string{"0.9", "1.0.dev0", "1.0a1", "1.0a2.dev1", "1.0b1", "1.0rc1", "1.0", "1.0+local", "1.0+abc.5",
	"1.0.post1", "1.0.post1.dev0", "1.0.post2+x", "1.0.1", "1.0.1a1", "1.1", "1.1.post1", "1.1.post1.dev2", "1.5",
	"1.5.0+local", "2.0.dev1", "2.0a1", "2.0", "2.1", "2.1.1", "2.2", "2.2.0", "2.2.1", "2.3.dev1", "3.0", "10.0",
	"1!0.1", "1!1.0", "1!1.0a1", "0", "0.0.1", "1.0.0.0.1"}

type oracleVersion struct {
	Str, Public, Local, Base string
	Pre, Post, Dev           bool
	Release                  []json.Number
	Epoch                    int
}

type oracleSpec struct {
	Str                                          string
	Prereleases, Pinned                          bool
	ContainsNone, ContainsTrue, ContainsFalse    []bool
	FilterNone, FilterTrue, FilterFalse          []string
	FilterpreNone, FilterpreTrue, FilterpreFalse []string
}

func (o *oracleSpec) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	f := map[string]any{"str": &o.Str, "prereleases": &o.Prereleases, "pinned": &o.Pinned,
		"contains_none": &o.ContainsNone, "contains_true": &o.ContainsTrue, "contains_false": &o.ContainsFalse,
		"filter_none": &o.FilterNone, "filter_true": &o.FilterTrue, "filter_false": &o.FilterFalse,
		"filterpre_none": &o.FilterpreNone, "filterpre_true": &o.FilterpreTrue, "filterpre_false": &o.FilterpreFalse}
	for k, dst := range f {
		raw, ok := m[k]
		if !ok {
			return fmt.Errorf("oracle output lacks %q", k)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return err
		}
	}
	return nil
}

func TestOracle(t *testing.T) {
	r := rand.New(rand.NewSource(440))
	versions := genVersions(r, 400)
	specs := genSpecs(r)
	var got struct {
		Versions []*oracleVersion
		Ranks    []int
		Specs    []*oracleSpec
	}
	pyoracle.Run(t, oracleScript, map[string]any{"versions": versions, "specs": specs, "pool": pool}, &got)

	parsed := map[int]Version{}
	for i, s := range versions {
		want := got.Versions[i]
		v, err := Parse(s)
		switch {
		case want == nil && err == nil:
			t.Errorf("Parse(%q) = %s, oracle says invalid", s, v)
			continue
		case want == nil:
			continue
		case err != nil:
			if strings.Contains(err.Error(), "ASCII") || strings.Contains(err.Error(), "too large") {
				continue // documented differences
			}
			t.Errorf("Parse(%q): %v, oracle says %q", s, err, want.Str)
			continue
		}
		parsed[i] = v
		gotV := oracleVersion{v.String(), v.Public(), v.Local(), v.BaseVersion(), v.IsPrerelease(),
			v.IsPostRelease(), v.IsDevRelease(), numbers(v.Release()), v.Epoch()}
		if fmt.Sprint(gotV) != fmt.Sprint(*want) {
			t.Errorf("Parse(%q):\n got %+v\nwant %+v", s, gotV, *want)
		}
		if w := MustParse(v.String()); !w.Equal(v) {
			t.Errorf("String() of %q does not round-trip", s)
		}
	}
	for i, vi := range parsed {
		for j, vj := range parsed {
			want := cmpInt(got.Ranks[i], got.Ranks[j])
			if c := vi.Compare(vj); c != want {
				t.Errorf("Compare(%q, %q) = %d, oracle %d", versions[i], versions[j], c, want)
			}
		}
	}

	poolV := make([]Version, len(pool))
	for i, p := range pool {
		poolV[i] = MustParse(p)
	}
	onlyPre := []Version{}
	for _, v := range poolV {
		if v.IsPrerelease() {
			onlyPre = append(onlyPre, v)
		}
	}
	tru, fal := true, false
	checked := 0
	known := map[string]int{}
	// differ checks one answer: ours must equal the oracle's, or the oracle's
	// must be 21.3's (the model) and ours must differ for a known reason.
	differ := func(what string, got, want, model string, reasons []string) {
		if got == want {
			return
		}
		switch {
		case model != want:
			t.Errorf("%s: the 21.3 model says %s, the oracle %s: the model is wrong", what, model, want)
		case len(reasons) == 0:
			t.Errorf("%s = %s, oracle (21.3) %s, and no packaging change explains it", what, got, want)
		default:
			for _, r := range reasons {
				known[r]++
			}
		}
	}
	for i, s := range specs {
		want := got.Specs[i]
		set, err := ParseSpecifierSet(s)
		if want != nil && err != nil && !validIn213(s) {
			t.Errorf("ParseSpecifierSet(%q): %v; the 21.3 model refuses it too, the oracle does not", s, err)
			continue
		}
		if want != nil && err != nil {
			known[changeNoWildcardSuffix]++ // 21.3 accepted it, 26.2 refuses it
			continue
		}
		if (want == nil) != (err != nil) {
			t.Errorf("ParseSpecifierSet(%q): err=%v, oracle valid=%v", s, err, want != nil)
			continue
		}
		if want == nil {
			continue
		}
		checked++
		differ(s+" str", set.String(), want.Str, legacyString(s), changesString(s, set))
		differ(s+" prereleases", fmt.Sprint(set.Prereleases()), fmt.Sprint(want.Prereleases), fmt.Sprint(legacySetPrereleases(set)), changesPre(set))
		if set.IsPinned() != want.Pinned {
			t.Errorf("%q: pinned=%v, oracle %v", s, set.IsPinned(), want.Pinned)
		}
		for k, v := range poolV {
			for _, c := range []struct {
				pre  tri
				want bool
			}{{none, want.ContainsNone[k]}, {yes, want.ContainsTrue[k]}, {no, want.ContainsFalse[k]}} {
				got := containsDefault(set, v, c.pre)
				model := legacySetContains(set, v, map[tri]bool{none: legacySetPrereleases(set), yes: true, no: false}[c.pre])
				differ(fmt.Sprintf("%q.contains(%s, prereleases=%s)", s, v, c.pre), fmt.Sprint(got), fmt.Sprint(c.want), fmt.Sprint(model), changes(set, []Version{v}, c.pre))
			}
		}
		for _, c := range []struct {
			in   []Version
			pre  tri
			want []string
			name string
		}{
			{poolV, none, want.FilterNone, ""}, {poolV, yes, want.FilterTrue, ""}, {poolV, no, want.FilterFalse, ""},
			{onlyPre, none, want.FilterpreNone, "/pre-only"}, {onlyPre, yes, want.FilterpreTrue, "/pre-only"},
			{onlyPre, no, want.FilterpreFalse, "/pre-only"},
		} {
			differ(fmt.Sprintf("%q.filter(prereleases=%s%s)", s, c.pre, c.name), strs(set.Filter(c.in, c.pre.ptr())),
				strings.Join(c.want, " "), strs(legacyFilter(set, c.in, c.pre.ptr())), changes(set, c.in, c.pre))
		}
	}
	_, _ = tru, fal
	for r, n := range known {
		t.Logf("%5d answers differ from 21.3 by %s", n, r)
	}
	t.Logf("oracle agreed on %d versions (%d pairs) and %d specifier sets x %d versions", len(parsed), len(parsed)*len(parsed), checked, len(poolV))
	if checked < 200 || len(parsed) < 350 {
		t.Fatalf("oracle coverage too small: %d specs, %d versions", checked, len(parsed))
	}
}

func strs(vs []Version) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return strings.Join(out, " ")
}

func numbers(xs []int) []json.Number {
	out := make([]json.Number, len(xs))
	for i, x := range xs {
		out[i] = json.Number(fmt.Sprint(x))
	}
	return out
}
