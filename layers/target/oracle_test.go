package target

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The oracle is pip's vendored packaging 21.3. These tests fail, never skip,
// when the interpreters are missing.
const (
	pyenvPython  = "/root/.pyenv/versions/3.11.7/bin/python3"
	debianPython = "/usr/bin/python3.11"
)

// runPython runs script under python (site enabled, so pip is importable)
// with stdin as input and decodes its JSON stdout into out.
func runPython(t *testing.T, python, script string, stdin any, out any) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("oracle interpreter missing: %v", err)
	}
	in, err := json.Marshal(stdin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), python, "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", python, err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: decoding oracle output: %v\n%s", python, err, b)
	}
}

func tagStrings(tags []Tag) []string {
	out := make([]string, len(tags))
	for i, t := range tags {
		out[i] = t.String()
	}
	return out
}

func assertSameList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at %d: got %q, want %q (len got %d, want %d)", what, i, got[i], want[i], len(got), len(want))
		}
	}
	t.Fatalf("%s: lengths differ: got %d, want %d", what, len(got), len(want))
}

const oracleSysTags = `
import json, sys, pip
from pip._vendor import packaging
from pip._vendor.packaging import tags, markers
from pip._internal.utils.compatibility_tags import get_supported
print(json.dumps({
    "pip": pip.__file__, "packaging": packaging.__version__,
    "sys_tags": [str(t) for t in tags.sys_tags()],
    "get_supported": [str(t) for t in get_supported()],
    "env": markers.default_environment(),
}))
`

// TestProbeMatchesPip: Probe each interpreter, then compare with pip's own
// answer from that same interpreter (its own pip: pyenv's, or Debian's).
func TestProbeMatchesPip(t *testing.T) {
	for _, tc := range []struct{ python, pipPrefix string }{
		{pyenvPython, "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/pip/"},
		{debianPython, "/usr/lib/python3/dist-packages/pip/"},
	} {
		t.Run(tc.python, func(t *testing.T) {
			var oracle struct {
				Pip          string            `json:"pip"`
				Packaging    string            `json:"packaging"`
				SysTags      []string          `json:"sys_tags"`
				GetSupported []string          `json:"get_supported"`
				Env          map[string]string `json:"env"`
			}
			runPython(t, tc.python, oracleSysTags, nil, &oracle)
			if !strings.HasPrefix(oracle.Pip, tc.pipPrefix) || oracle.Packaging != "21.3" {
				t.Fatalf("oracle is pip at %s with packaging %s; want %s* with 21.3", oracle.Pip, oracle.Packaging, tc.pipPrefix)
			}
			tg, err := Probe(context.Background(), tc.python)
			if err != nil {
				t.Fatal(err)
			}
			got := tagStrings(tg.Tags())
			assertSameList(t, "Tags vs get_supported()", got, oracle.GetSupported)
			anyTag := "cp" + strings.ReplaceAll(tg.Python, ".", "") + "-none-any"
			withoutAny := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == anyTag })
			assertSameList(t, "Tags minus "+anyTag+" vs sys_tags()", withoutAny, oracle.SysTags)
			if !mapsEqual(tg.Markers, oracle.Env) {
				t.Fatalf("markers:\n got %v\nwant %v", tg.Markers, oracle.Env)
			}
			if last := tg.Platforms[len(tg.Platforms)-1]; last != "linux_x86_64" {
				t.Errorf("last platform %q, want linux_x86_64", last)
			}
			for i, tag := range tg.Tags() {
				if r := tg.Rank(tag); r != i {
					t.Fatalf("Rank(%s) = %d, want %d", tag, r, i)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// oraclePatched computes packaging's tags for a target with the platform
// detection monkeypatched: glibc, musl, ELF header, sysconfig platform.
const oraclePatched = `
import json, sys, sysconfig
from pip._vendor.packaging import tags, _manylinux, _musllinux

def elf(e):
    if e is None:
        return None
    h = object.__new__(_manylinux._ELFFileHeader)
    h.e_ident_class, h.e_ident_data, h.e_machine, h.e_flags = e["class"], e["data"], e["machine"], e["flags"]
    return h

out = []
for c in json.load(sys.stdin):
    glibc = c.get("glibc")
    _manylinux._get_glibc_version = lambda g=glibc: (-1, -1) if g is None else _manylinux._parse_glibc_version(g)
    _manylinux._get_elf_header = lambda e=c.get("elf"): elf(e)
    musl = c.get("musl")
    _musllinux._get_musl_version = lambda exe, m=musl: None if m is None else _musllinux._parse_musl_version(m)
    sysconfig.get_platform = lambda p=c["sysconfig_platform"]: p
    if c["mode"] == "probe":
        platforms = list(tags._linux_platforms(c["is_32bit"]))
    elif c["mode"] == "manylinux":
        platforms = list(_manylinux.platform_tags("linux_" + c["arch"], c["arch"]))
    elif c["mode"] == "musllinux":
        platforms = list(_musllinux.platform_tags(c["arch"]))
    else:
        platforms = ["linux_" + c["arch"]]
    v = (3, c["minor"])
    interp = "cp3%d" % c["minor"]
    got = list(tags.cpython_tags(v, c["abis"], platforms)) + list(tags.compatible_tags(v, interp, platforms))
    out.append({"platforms": platforms, "tags": [str(t) for t in got]})
print(json.dumps(out))
`

type oracleCase struct {
	Mode             string    `json:"mode"`
	Arch             string    `json:"arch,omitempty"`
	Minor            int       `json:"minor"`
	ABIs             []string  `json:"abis"`
	Glibc            *string   `json:"glibc"`
	Musl             *string   `json:"musl"`
	ELF              *elfFacts `json:"elf"`
	SysconfigPlatorm string    `json:"sysconfig_platform"`
	Is32Bit          bool      `json:"is_32bit"`
}

type oracleResult struct {
	Platforms []string `json:"platforms"`
	Tags      []string `json:"tags"`
}

func ptr[T any](v T) *T { return &v }

// TestFromFlagsMatchesPackaging: FromFlags for many floors and versions
// against packaging with glibc/musl patched to the floor.
func TestFromFlagsMatchesPackaging(t *testing.T) {
	cases := []struct {
		python, platform string
		debug            bool
	}{
		{"3.11", "manylinux_2_28_x86_64", false},
		{"3.11.7", "manylinux_2_17_x86_64", false},
		{"3.8", "manylinux_2_5_x86_64", false},
		{"3.12", "manylinux_2_12_i686", false},
		{"3.13", "manylinux_2_31_aarch64", false},
		{"3.10", "manylinux_2_17_aarch64", false},
		{"3.9", "manylinux_2_28_armv7l", false},
		{"3.11", "manylinux_2_28_ppc64le", false},
		{"3.11", "manylinux_2_34_s390x", false},
		{"3.11", "manylinux_2_17_ppc64", false},
		{"3.14", "musllinux_1_2_x86_64", false},
		{"3.11", "musllinux_1_0_aarch64", false},
		{"3.11", "musllinux_1_1_riscv64", false},
		{"3.11", "linux_x86_64", false},
		{"3.12", "linux_riscv64", false},
		{"3.11", "manylinux_2_28_x86_64", true},
	}
	var in []oracleCase
	var targets []Target
	for _, c := range cases {
		tg, err := FromFlags(c.python, c.platform)
		if err != nil {
			t.Fatalf("FromFlags(%q, %q): %v", c.python, c.platform, err)
		}
		if c.debug {
			tg.ABI += "d"
		}
		f, _ := parseFloor(c.platform)
		minor, _ := tg.minor()
		oc := oracleCase{Mode: f.kind, Arch: f.arch, Minor: minor, ABIs: []string{tg.ABI}, SysconfigPlatorm: "linux-" + f.arch}
		if c.debug {
			oc.ABIs = append(oc.ABIs, strings.TrimSuffix(tg.ABI, "d"))
		}
		switch f.kind {
		case "manylinux":
			oc.Glibc = ptr("2." + itoa(f.minor))
			oc.ELF = &elfFacts{Class: 1, Data: 1, Machine: map[string]int{"i686": 3, "armv7l": 40}[f.arch], Flags: 0x05000400}
		case "musllinux":
			oc.Musl = ptr("musl libc (" + f.arch + ")\nVersion 1." + itoa(f.minor) + ".4\nDynamic Program Loader\n")
		}
		in = append(in, oc)
		targets = append(targets, tg)
	}
	var want []oracleResult
	runPython(t, pyenvPython, oraclePatched, in, &want)
	for i, c := range cases {
		t.Run(c.python+"/"+c.platform, func(t *testing.T) {
			assertSameList(t, "platforms", targets[i].Platforms, want[i].Platforms)
			assertSameList(t, "tags", tagStrings(targets[i].Tags()), want[i].Tags)
		})
	}
}

// TestProbePlatformsMatchPackaging: the probe's Go half against packaging's
// _linux_platforms for hosts we cannot run here (32-bit, musl, old glibc).
func TestProbePlatformsMatchPackaging(t *testing.T) {
	i386 := &elfFacts{Class: 1, Data: 1, Machine: 3}
	armhf := &elfFacts{Class: 1, Data: 1, Machine: 40, Flags: 0x05000400}
	armsf := &elfFacts{Class: 1, Data: 1, Machine: 40, Flags: 0x05000000}
	x64 := &elfFacts{Class: 2, Data: 1, Machine: 62}
	musl := "musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Loader\nUsage: ..."
	cases := []oracleCase{
		{SysconfigPlatorm: "linux-x86_64", Glibc: ptr("2.36"), ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: ptr("2.17"), ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: ptr("2.28-2019.04 vendor"), ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: ptr("2.3"), ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: ptr("garbage"), ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: nil, Musl: &musl, ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: nil, Musl: ptr("musl libc\nno version"), ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Glibc: nil, ELF: x64},
		{SysconfigPlatorm: "linux-x86_64", Is32Bit: true, Glibc: ptr("2.31"), ELF: i386},
		{SysconfigPlatorm: "linux-x86_64", Is32Bit: true, Glibc: ptr("2.31"), ELF: x64},
		{SysconfigPlatorm: "linux-aarch64", Is32Bit: true, Glibc: ptr("2.31"), ELF: armhf},
		{SysconfigPlatorm: "linux-aarch64", Is32Bit: true, Glibc: ptr("2.31"), ELF: armsf},
		{SysconfigPlatorm: "linux-aarch64", Glibc: ptr("2.35"), ELF: nil},
		{SysconfigPlatorm: "linux-ppc64le", Glibc: ptr("2.17"), ELF: nil},
		{SysconfigPlatorm: "linux-riscv64", Glibc: ptr("2.35"), ELF: nil},
	}
	for i := range cases {
		cases[i].Mode, cases[i].Minor, cases[i].ABIs = "probe", 11, []string{"cp311"}
	}
	var want []oracleResult
	runPython(t, pyenvPython, oraclePatched, cases, &want)
	for i, c := range cases {
		f := probeFacts{SysconfigPlat: c.SysconfigPlatorm, Is32Bit: c.Is32Bit, Glibc: c.Glibc, ELF: c.ELF, MuslLoaderOutput: c.Musl}
		got, err := f.platforms()
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		assertSameList(t, "case "+itoa(i)+" platforms", got, want[i].Platforms)
	}
}

const oracleParseTag = `
import json, sys
from pip._vendor.packaging import tags
print(json.dumps([sorted(str(t) for t in tags.parse_tag(s)) for s in json.load(sys.stdin)]))
`

func TestParseTagSetMatchesPackaging(t *testing.T) {
	in := []string{
		"py3-none-any", "py2.py3-none-any", "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64",
		"CP311-ABI3-Linux_X86_64", "cp38.cp39.cp310-abi3.none-any.linux_x86_64", "py3.py3-none-any",
		"pp39-pypy39_pp73-manylinux_2_17_x86_64",
	}
	var want [][]string
	runPython(t, pyenvPython, oracleParseTag, in, &want)
	for i, s := range in {
		tags, err := ParseTagSet(s)
		if err != nil {
			t.Fatalf("ParseTagSet(%q): %v", s, err)
		}
		got := tagStrings(tags)
		slices.Sort(got)
		assertSameList(t, s, got, want[i])
	}
}
