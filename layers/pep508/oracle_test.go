package pep508

import (
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/internal/pyoracle"
	"github.com/pylayer/pylayer/layers/pep440"
)

const oracleScript = `
from pip._vendor.packaging.markers import Marker, InvalidMarker
from pip._vendor.packaging.requirements import Requirement, InvalidRequirement
from pip._vendor.packaging.specifiers import Specifier
from pip._vendor.packaging.utils import canonicalize_name
out = {"markers": [], "reqs": []}
for s in inp["markers"]:
    try:
        m = Marker(s)
    except InvalidMarker:
        out["markers"].append(None)
        continue
    res = []
    for env in inp["envs"]:
        for extra in inp["extras"]:
            e = dict(env)
            e["extra"] = canonicalize_name(extra)
            try:
                res.append("true" if m.evaluate(e) else "false")
            except Exception as ex:
                res.append("error")
    out["markers"].append({"str": str(m), "eval": res})
for s in inp["reqs"]:
    try:
        r = Requirement(s)
        if any(not isinstance(c, Specifier) for c in r.specifier):
            raise InvalidRequirement("legacy")
    except (InvalidRequirement, ValueError):
        out["reqs"].append(None)
        continue
    out["reqs"].append({"name": r.name, "extras": sorted(set(canonicalize_name(e) for e in r.extras)),
        "url": r.url or "", "spec": str(r.specifier), "marker": str(r.marker) if r.marker else None})
`

var oracleEnvs = []Environment{
	{"python_version": "3.11", "python_full_version": "3.11.7", "os_name": "posix", "sys_platform": "linux",
		"platform_release": "6.1.0-28-amd64", "platform_system": "Linux", "platform_version": "#1 SMP Debian 6.1.119-1",
		"platform_machine": "x86_64", "platform_python_implementation": "CPython", "implementation_name": "cpython",
		"implementation_version": "3.11.7"},
	{"python_version": "3.8", "python_full_version": "3.8.10", "os_name": "nt", "sys_platform": "win32",
		"platform_release": "10", "platform_system": "Windows", "platform_version": "10.0.19041",
		"platform_machine": "AMD64", "platform_python_implementation": "CPython", "implementation_name": "cpython",
		"implementation_version": "3.8.10"},
	{"python_version": "3.13", "python_full_version": "3.13.0rc1", "os_name": "posix", "sys_platform": "darwin",
		"platform_release": "23.1.0", "platform_system": "Darwin", "platform_version": "Darwin Kernel Version 23.1.0",
		"platform_machine": "arm64", "platform_python_implementation": "PyPy", "implementation_name": "pypy",
		"implementation_version": "7.3.12"},
}

var oracleExtras = []string{"", "test", "Test_Extra", "socks", "a.b"}

func genMarkers(r *rand.Rand, n int) []string {
	pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
	vars := []string{"python_version", "python_full_version", "os_name", "sys_platform", "platform_release",
		"platform_system", "platform_version", "platform_machine", "platform_python_implementation",
		"implementation_name", "implementation_version", "extra", "os.name", "sys.platform", "platform.machine",
		"python_implementation", "platform.python_implementation", "platform.version"}
	vals := []string{"3.8", "3.11", "3.12", "3", "3.11.7", "3.13.0rc1", "3.8.*", "3.11.*", "2.7", "posix", "nt",
		"linux", "win32", "darwin", "Linux", "x86_64", "AMD64", "arm64", "CPython", "cpython", "pypy", "test",
		"test-extra", "socks", "a-b", "", "6.1", "10", "23.1.0", "lin", "3.11.7+local", "v3.11", "=3.11"}
	ops := []string{"==", "!=", "<", "<=", ">", ">=", "~=", "===", "in", "not in"}
	cmp := func() string {
		v, val, op := pick(vars...), pick(vals...), pick(ops...)
		if v == "extra" {
			// Oracle literals for extra are normalized: packaging 21.3 does not
			// normalize them and we do (PEP 685); see TestExtraNormalization.
			val = pick("test", "test-extra", "socks", "a-b", "", "3-8")
		}
		q := pick(`"`, `'`)
		sp := pick(" ", "", "  ")
		switch r.Intn(12) {
		case 0:
			return q + val + q + sp + op + sp + v // literal on the left
		case 1:
			if v == "extra" {
				v = "os_name"
			}
			return v + sp + op + sp + pick(vars...) // variable on both sides
		}
		return v + sp + op + sp + q + val + q
	}
	var expr func(depth int) string
	expr = func(depth int) string {
		atoms := 1 + r.Intn(3)
		parts := []string{}
		for i := 0; i < atoms; i++ {
			if i > 0 {
				parts = append(parts, pick("and", "or"))
			}
			if depth < 2 && r.Intn(4) == 0 {
				inner := expr(depth + 1)
				parts = append(parts, "("+inner+")")
			} else {
				parts = append(parts, cmp())
			}
		}
		return strings.Join(parts, " ")
	}
	var out []string
	for len(out) < n {
		out = append(out, expr(0))
	}
	return append(out, "", "python_version", `python_version < "3`, `os_name == "a" andos_name == "b"`,
		`(python_version < "3.12"`, `foo == "x"`, `python_version <> "3"`, `"a" == "b"`, `os_name not  in "posix"`,
		`os_name == 'a"b'`, `os_name == "a\tb"`, `os_name == "a\\x"`, `(((os_name == "nt")))`,
		"os_name\n==\t'posix'", `os_name == "posix" or`, `python_version >= "3.8" and extra == 'test'`,
		`os_name == "posix"orextra == "test"`, `python_full_version >= "3.8"`, `platform_release >= "5"`,
		`python_version === "3.11"`, `"3.11" === python_version`, `os_name === "POSIX"`, `python_version ~= "3.11"`)
}

func genReqs(r *rand.Rand, n int) []string {
	pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
	var out []string
	for len(out) < n {
		s := pick("requests", "Django", "zope.interface", "typing_extensions", "A", "a-b_c.d", "x1", "py.test")
		if r.Intn(3) == 0 {
			s += pick(" ", "") + "[" + pick("", "security", "Security,socks", " a , b ", "a_b,A-B", "tests,tests") + "]"
		}
		switch r.Intn(8) {
		case 0:
			s += pick(" @ https://example.com/a.whl", "@ file:///tmp/a.whl", " @ https://x/y.whl ", " @ file:/tmp/a.whl",
				" @ /tmp/a.whl", " @ git+https://github.com/a/b@v1#egg=b", " @ https://e.com/a.whl;os_name=='x'")
		case 1, 2, 3:
			spec := pick(">=1.0", "==1.0.*", "~=2.2", "<2,>=1", " >= 1.0 , < 2 ", "!=1.5", "===1.0", "~=1.0alpha1",
				"~=1.0b1", "==1.0+local", ">1.0.post1", "==foo", "~=1", ">=1.0,", "=== 1.0", "<=2.0rc1")
			if r.Intn(2) == 0 {
				spec = pick(" ", "") + "(" + spec + ")"
			}
			s += spec
		}
		if r.Intn(3) == 0 {
			s += pick(" ; ", ";", " ;", "; ") + pick(`python_version < "3.12"`, `extra == "test"`,
				`os_name == "posix" and (sys_platform == "linux" or sys_platform == "darwin")`, `foo == "x"`)
		}
		out = append(out, s)
	}
	return append(out, "", "-a", "a-", "a b", "a[", "a[x", "a[x,]", "a[]", "a()", "a (>=1", "a>=1)", " a ", "a @ ",
		"a===1.0;os_name=='a'", "a (===1.0)", "a>=1 ;", "a @ https://e.com/x ; os_name=='posix'", "a @ HTTP://e.com/x",
		"a @ FILE:///x", "a @ file:///x?", "a @ file://h/x#f", "a @ file:////x", "a @ //host/x", "a>=1 and", "é",
		"a[x] @ https://e.com/a.whl ; extra == 'x'", "a;os_name=='x'", "a ( >= 1.0 , < 2 )")
}

type oracleMarker struct {
	Str  string
	Eval []string
}

type oracleReq struct {
	Name, URL, Spec string
	Extras          []string
	Marker          *string
}

func TestOracle(t *testing.T) {
	r := rand.New(rand.NewSource(508))
	markers, reqs := genMarkers(r, 400), genReqs(r, 300)
	var got struct {
		Markers []*oracleMarker
		Reqs    []*oracleReq
	}
	pyoracle.Run(t, oracleScript, map[string]any{"markers": markers, "reqs": reqs, "envs": oracleEnvs, "extras": oracleExtras}, &got)
	evals := 0
	known := map[string]int{}
	for i, s := range markers {
		want := got.Markers[i]
		m, err := ParseMarker(s)
		if (want == nil) != (err != nil) {
			if r := tokenChange(s); r != "" {
				known[r]++
			} else {
				t.Errorf("ParseMarker(%q): err=%v, oracle valid=%v", s, err, want != nil)
			}
			continue
		}
		if want == nil {
			continue
		}
		why := markerChanges(m)
		if !strings.ContainsAny(s, `\'`) && m.String() != want.Str {
			if r := strChanges(m); r != "" {
				known[r]++
			} else {
				t.Errorf("ParseMarker(%q).String() = %q, oracle %q", s, m.String(), want.Str)
			}
		}
		k := 0
		for _, env := range oracleEnvs {
			for _, extra := range oracleExtras {
				ok, err := m.Eval(env, extra)
				g := fmt.Sprint(ok)
				if err != nil {
					g = "error"
				}
				if g != want.Eval[k] {
					if len(why) == 0 {
						t.Errorf("%q with %s/extra=%q: got %s, oracle %s, and no packaging change explains it", s, env["sys_platform"], extra, g, want.Eval[k])
					}
					for _, r := range why {
						known[r]++
					}
				}
				k++
				evals++
			}
		}
	}
	parsed := 0
	for i, s := range reqs {
		want := got.Reqs[i]
		req, err := ParseRequirement(s)
		if r := reqChange(s); r != "" && (want == nil) != (err != nil) || r != "" && want != nil && req.Specifier.String() != want.Spec {
			known[r]++
			continue
		}
		if (want == nil) != (err != nil) {
			t.Errorf("ParseRequirement(%q): err=%v, oracle valid=%v", s, err, want != nil)
			continue
		}
		if want == nil {
			continue
		}
		parsed++
		var gm *string
		if req.Marker != nil {
			ms := req.Marker.String()
			gm = &ms
		}
		g := oracleReq{req.Name, req.URL, req.Specifier.String(), req.Extras, gm}
		if fmt.Sprintf("%q %q %q %q %v", g.Name, g.URL, g.Spec, g.Extras, deref(g.Marker)) !=
			fmt.Sprintf("%q %q %q %q %v", want.Name, want.URL, want.Spec, nonNil(want.Extras), deref(want.Marker)) {
			t.Errorf("ParseRequirement(%q):\n got %+v %v\nwant %+v %v", s, g, deref(g.Marker), *want, deref(want.Marker))
		}
	}
	for r, n := range known {
		t.Logf("%5d answers differ from 21.3 by %s", n, r)
	}
	t.Logf("oracle agreed on %d markers x %d evaluations and %d requirements", len(markers), evals, parsed)
	if evals < 3000 || parsed < 150 {
		t.Fatalf("oracle coverage too small")
	}
}

// The changes from packaging 21.3 (the oracle) to 26.2 that make this
// package answer differently.
const (
	changePreEnv    = "packaging 22.0 (#523): pre-release interpreter versions satisfy markers (python_full_version \"3.13.0rc1\" >= \"3.8\")"
	changeOrdered   = "packaging 26.0 (#939): only version markers compare as versions; otherwise ordered comparisons are false, <= and >= mean ==, ~= and === are undefined"
	changeTokens    = "packaging 22.0 (#468, the hand-written parser): whitespace is spaces and tabs, and/or/in/not and variables end on word boundaries"
	changeExtraStr  = "packaging 26.0 (#1024): the value compared with extra is normalized when parsed"
	changeArbitrary = "packaging 22.0 (#468, the hand-written parser): === ends at ';' and ')', and () is an empty specifier"
)

func markerChanges(m *Marker) []string {
	var out []string
	seen := map[string]bool{}
	var walk func([]item)
	walk = func(items []item) {
		for _, it := range items {
			if it.group != nil {
				walk(it.group)
			}
			c := it.cmp
			if c == nil {
				continue
			}
			key, val := c.l.s, c.r.s
			if !c.l.isVar {
				key, val = c.r.s, c.l.s
			}
			if (key == "python_full_version" || key == "implementation_version" || key == "python_version") && !seen[changePreEnv] {
				seen[changePreEnv] = true
				out = append(out, changePreEnv)
			}
			_, err := pep440.ParseSpecifier(c.op + val)
			ordered := c.op != "==" && c.op != "!=" && c.op != "in" && c.op != "not in"
			if (ordered && (err != nil || c.op == "===") || !versionKeys[key] && (ordered || err == nil)) && !seen[changeOrdered] {
				seen[changeOrdered] = true
				out = append(out, changeOrdered)
			}
		}
	}
	walk(m.items)
	return out
}

var runTogether = regexp.MustCompile(`[A-Za-z_'")](?:and|or|in|not)(?:[ \t'"(]|$)|(?:^|[ \t'")])(?:and|or|in)[A-Za-z_'"(]|(?:name|system|version|platform|machine|implementation|release)(?:in|not|and|or)[A-Za-z_]|[\n\r]|not[ \t]{2,}in|not\tin`)

// tokenChange explains a marker 21.3 and 26.2 disagree is valid.
func tokenChange(s string) string {
	if runTogether.MatchString(s) {
		return changeTokens
	}
	return ""
}

func strChanges(m *Marker) string {
	if strings.Contains(m.String(), "extra") {
		return changeExtraStr
	}
	return ""
}

func reqChange(s string) string {
	if strings.Contains(s, "===") || strings.Contains(strings.ReplaceAll(s, " ", ""), "()") {
		return changeArbitrary
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func nonNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
