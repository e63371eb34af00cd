package target

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
)

func FuzzParseTagSet(f *testing.F) {
	for _, s := range []string{
		"py3-none-any", "py2.py3-none-any", "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64",
		"cp38.cp39-abi3.none-any.linux_x86_64", "--", "a.b.c-d.e-f.g", "PY3-NONE-ANY", "py3-none-any-x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tags, err := ParseTagSet(s)
		if err != nil {
			return
		}
		if len(tags) == 0 || len(tags) > maxTagSet {
			t.Fatalf("%q: %d tags", s, len(tags))
		}
		seen := map[Tag]bool{}
		for _, tag := range tags {
			if seen[tag] {
				t.Fatalf("%q: duplicate %s", s, tag)
			}
			seen[tag] = true
			back, err := ParseTagSet(tag.String())
			if err != nil || len(back) != 1 || back[0] != tag {
				t.Fatalf("%q: tag %s does not re-parse: %v %v", s, tag, back, err)
			}
		}
	})
}

func FuzzFromFlags(f *testing.F) {
	for _, s := range [][2]string{
		{"3.11", "manylinux_2_28_x86_64"}, {"3.12.1", "musllinux_1_2_aarch64"}, {"3.8", "linux_riscv64"},
		{"3.11", "manylinux2014_x86_64"}, {"3.99", "manylinux_2_99_i686"}, {"3.011", "linux_x86_64"}, {"", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, python, platform string) {
		tg, err := FromFlags(python, platform)
		if err != nil {
			return
		}
		if err := tg.Validate(); err != nil {
			t.Fatalf("FromFlags(%q, %q) invalid: %v", python, platform, err)
		}
		b1, err := json.Marshal(tg)
		if err != nil {
			t.Fatal(err)
		}
		var back Target
		if err := json.Unmarshal(b1, &back); err != nil {
			t.Fatalf("%s: %v", b1, err)
		}
		b2, err := json.Marshal(back)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("round trip unstable: %s vs %s (%v)", b1, b2, err)
		}
		tags := tg.Tags()
		if len(tags) == 0 || tg.Rank(tags[0]) != 0 || tg.Rank(tags[len(tags)-1]) != len(tags)-1 {
			t.Fatalf("bad tags for %q %q", python, platform)
		}
	})
}

func FuzzTargetJSON(f *testing.F) {
	for _, p := range [][2]string{{"3.11", "manylinux_2_28_x86_64"}, {"3.12.1", "musllinux_1_2_aarch64"}} {
		tg, err := FromFlags(p[0], p[1])
		if err != nil {
			f.Fatal(err)
		}
		b, _ := json.Marshal(tg)
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var tg Target
		if err := json.Unmarshal(b, &tg); err != nil {
			return
		}
		b1, err := json.Marshal(tg)
		if err != nil {
			t.Fatalf("decoded target does not encode: %v", err)
		}
		var back Target
		if err := json.Unmarshal(b1, &back); err != nil {
			t.Fatal(err)
		}
		if b2, _ := json.Marshal(back); !bytes.Equal(b1, b2) {
			t.Fatalf("unstable: %s vs %s", b1, b2)
		}
	})
}

func FuzzParseVersions(f *testing.F) {
	for _, s := range []string{"2.36", "2.28-2019.04", "garbage", "musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Loader", "musl\n\nVersion 1.", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, b, ok := parseGlibcVersion(s); ok && (a < 0 || b < 0) {
			t.Fatalf("glibc %q -> %d.%d", s, a, b)
		}
		if a, b, ok := parseMuslVersion(s); ok && (a < 0 || b < 0) {
			t.Fatalf("musl %q -> %d.%d", s, a, b)
		}
		f := probeFacts{SysconfigPlat: "linux-x86_64", Glibc: &s, MuslLoaderOutput: &s}
		if p, err := f.platforms(); err == nil && (len(p) == 0 || len(p) > maxPlatforms) {
			t.Fatalf("%q: %d platforms", s, len(p))
		}
	})
}

// The patterns the hand-written matchers of the platform floor, the platform tags and
// python_full stand for.
var (
	floorPattern      = regexp.MustCompile(`^(manylinux|musllinux)_([0-9]+)_([0-9]+)_([a-z0-9_]+)$`)
	platformPattern   = regexp.MustCompile(`^(?:manylinux_2_[0-9]+|manylinux1|manylinux2010|manylinux2014|musllinux_1_[0-9]+|linux)_([a-z0-9_]+)$`)
	pythonFullPattern = regexp.MustCompile(`^3\.([0-9]+)\.([0-9]+)(?:(?:a|b|rc)[0-9]+)?\+?$`)
)

// FuzzPlatformMatchers: matchFloor, platformArch and pythonFullMinor give exactly what
// their patterns give, on any string.
func FuzzPlatformMatchers(f *testing.F) {
	for _, s := range []string{
		"manylinux_2_28_x86_64", "musllinux_1_2_aarch64", "manylinux_2_1_7_x86", "manylinux1_x86_64",
		"manylinux2010_i686", "manylinux2014_x86_64", "linux_x86_64", "linux_", "manylinux_2__x86",
		"manylinux_02_017_x86_64", "musllinux_1_", "manylinux_2_28_X86", "manylinux_2_28_x86\xff",
		"3.11.7", "3.11.7+", "3.11.7rc1", "3.11.7rc1+", "3.11.7++", "3.11.7a", "3.11", "3.11.",
		"3..7", "3.011.7b2", "3.11.7+rc1", "3.11.7rc+1", "4.11.7", "3.11.7\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kind, major, minor, arch, ok := matchFloor(s)
		if m := floorPattern.FindStringSubmatch(s); (m != nil) != ok || (ok && (m[1] != kind || m[2] != major || m[3] != minor || m[4] != arch)) {
			t.Errorf("matchFloor(%q) = %q %q %q %q %v, the pattern %q", s, kind, major, minor, arch, ok, m)
		}
		want := ""
		if m := platformPattern.FindStringSubmatch(s); m != nil {
			want = m[1]
		}
		if got := platformArch(s); got != want {
			t.Errorf("platformArch(%q) = %q, the pattern %q", s, got, want)
		}
		pm, pok := pythonFullMinor(s)
		if m := pythonFullPattern.FindStringSubmatch(s); (m != nil) != pok || (pok && m[1] != pm) {
			t.Errorf("pythonFullMinor(%q) = %q %v, the pattern %q", s, pm, pok, m)
		}
	})
}
