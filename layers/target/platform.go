package target

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// Limits that keep platform lists small and reject implausible input.
const (
	maxGlibcMinor = 99 // glibc 2.99 is decades away; higher is a typo or an attack
	maxMuslMinor  = 99
	maxPlatforms  = 512
)

// manylinuxArches are the architectures packaging 21.3
// (_manylinux._have_compatible_abi) emits manylinux tags for.
var manylinuxArches = map[string]bool{
	"x86_64": true, "i686": true, "aarch64": true, "armv7l": true,
	"ppc64": true, "ppc64le": true, "s390x": true,
}

// knownArches are the architectures accepted in a platform floor.
var knownArches = []string{"aarch64", "armv7l", "i686", "ppc64", "ppc64le", "riscv64", "s390x", "x86_64"}

// legacyManylinux maps glibc versions to the PEP 513/571/599 aliases,
// as _manylinux._LEGACY_MANYLINUX_MAP does.
var legacyManylinux = map[[2]int]string{
	{2, 17}: "manylinux2014",
	{2, 12}: "manylinux2010",
	{2, 5}:  "manylinux1",
}

// floor is a parsed platform floor.
type floor struct {
	kind         string // "manylinux", "musllinux" or "linux"
	major, minor int    // glibc or musl version; zero for "linux"
	arch         string
}

// matchFloor matches `^(manylinux|musllinux)_([0-9]+)_([0-9]+)_([a-z0-9_]+)$`, returning
// the groups, without a regular expression: every run validates its layers' targets, and
// compiling the pattern cost more than the rest of the check (FuzzPlatformMatchers holds
// the two to the pattern).
func matchFloor(s string) (kind, major, minor, arch string, ok bool) {
	for _, k := range []string{"manylinux", "musllinux"} {
		rest, found := strings.CutPrefix(s, k+"_")
		if !found {
			continue
		}
		if major, rest, found = cutDigits(rest); !found {
			return "", "", "", "", false
		}
		if minor, rest, found = cutDigits(rest); !found || !isArchName(rest) {
			return "", "", "", "", false
		}
		return k, major, minor, rest, true
	}
	return "", "", "", "", false
}

// leadingDigits is the length of the run of ASCII digits s starts with.
func leadingDigits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// cutDigits cuts a run of one or more ASCII digits and the "_" after it off s.
func cutDigits(s string) (digits, rest string, ok bool) {
	i := leadingDigits(s)
	if i == 0 || i == len(s) || s[i] != '_' {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// isArchName reports whether s matches [a-z0-9_]+.
func isArchName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return s != ""
}

const platformWant = "want manylinux_2_N_ARCH, musllinux_1_N_ARCH or linux_ARCH"

func isKnownArch(a string) bool {
	for _, k := range knownArches {
		if k == a {
			return true
		}
	}
	return false
}

// canonicalInt parses a decimal without sign or leading zeros.
func canonicalInt(s string) (int, bool) {
	if s == "" || len(s) > 4 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// parseFloor parses a platform floor such as manylinux_2_28_x86_64.
func parseFloor(s string) (floor, error) {
	if strings.HasPrefix(s, "linux_") {
		arch := strings.TrimPrefix(s, "linux_")
		if !isKnownArch(arch) {
			return floor{}, fmt.Errorf("%w: %q: unknown architecture %q (known: %s)", ErrInvalidPlatform, s, arch, strings.Join(knownArches, ", "))
		}
		return floor{kind: "linux", arch: arch}, nil
	}
	for _, l := range []string{"manylinux1_", "manylinux2010_", "manylinux2014_"} {
		if strings.HasPrefix(s, l) {
			v := map[string]string{"manylinux1_": "2_5", "manylinux2010_": "2_12", "manylinux2014_": "2_17"}[l]
			return floor{}, fmt.Errorf("%w: %q: %s (the legacy alias %s is manylinux_%s_%s)",
				ErrInvalidPlatform, s, platformWant, strings.TrimSuffix(l, "_"), v, strings.TrimPrefix(s, l))
		}
	}
	kind, majorS, minorS, arch, ok := matchFloor(s)
	if !ok {
		return floor{}, fmt.Errorf("%w: %q: %s", ErrInvalidPlatform, s, platformWant)
	}
	major, ok1 := canonicalInt(majorS)
	minor, ok2 := canonicalInt(minorS)
	if !ok1 || !ok2 {
		return floor{}, fmt.Errorf("%w: %q: versions must be plain decimal numbers", ErrInvalidPlatform, s)
	}
	if !isKnownArch(arch) {
		return floor{}, fmt.Errorf("%w: %q: unknown architecture %q (known: %s)", ErrInvalidPlatform, s, arch, strings.Join(knownArches, ", "))
	}
	switch kind {
	case "manylinux":
		if major != 2 {
			return floor{}, fmt.Errorf("%w: %q: glibc major version must be 2", ErrInvalidPlatform, s)
		}
		if !manylinuxArches[arch] {
			return floor{}, fmt.Errorf("%w: %q: pip does not install manylinux wheels on %s; use linux_%s", ErrInvalidPlatform, s, arch, arch)
		}
		if lo := oldestGlibcMinor(arch); minor < lo {
			return floor{}, fmt.Errorf("%w: %q: the oldest manylinux for %s is manylinux_2_%d_%s", ErrInvalidPlatform, s, arch, lo, arch)
		}
		if minor > maxGlibcMinor {
			return floor{}, fmt.Errorf("%w: %q: glibc 2.%d is implausible", ErrInvalidPlatform, s, minor)
		}
	case "musllinux":
		if major != 1 {
			return floor{}, fmt.Errorf("%w: %q: musl major version must be 1", ErrInvalidPlatform, s)
		}
		if minor > maxMuslMinor {
			return floor{}, fmt.Errorf("%w: %q: musl 1.%d is implausible", ErrInvalidPlatform, s, minor)
		}
	}
	return floor{kind: kind, major: major, minor: minor, arch: arch}, nil
}

// oldestGlibcMinor is the oldest glibc 2.x packaging 21.3 emits tags for.
func oldestGlibcMinor(arch string) int {
	if arch == "x86_64" || arch == "i686" {
		return 5
	}
	return 17
}

// expand returns the platform list a floor stands for, most specific first.
func (f floor) expand() []string {
	switch f.kind {
	case "manylinux":
		return manylinuxPlatforms("linux_"+f.arch, f.arch, f.major, f.minor)
	case "musllinux":
		return musllinuxPlatforms(f.arch, f.major, f.minor)
	default:
		return []string{"linux_" + f.arch}
	}
}

// manylinuxPlatforms mirrors packaging 21.3 _manylinux.platform_tags for a
// system glibc of major.minor, assuming _have_compatible_abi(arch) holds and
// no _manylinux module overrides compatibility.
func manylinuxPlatforms(linux, arch string, major, minor int) []string {
	if !manylinuxArches[arch] {
		return nil
	}
	tooOld := [2]int{2, 16}
	if arch == "x86_64" || arch == "i686" {
		tooOld = [2]int{2, 4}
	}
	maxList := [][2]int{{major, minor}}
	for m := major - 1; m > 1; m-- {
		maxList = append(maxList, [2]int{m, 50}) // _LAST_GLIBC_MINOR default
	}
	var out []string
	for _, gmax := range maxList {
		minMinor := -1
		if gmax[0] == tooOld[0] {
			minMinor = tooOld[1]
		}
		for m := gmax[1]; m > minMinor; m-- {
			v := [2]int{gmax[0], m}
			out = append(out, strings.ReplaceAll(linux, "linux", fmt.Sprintf("manylinux_%d_%d", v[0], v[1])))
			if legacy, ok := legacyManylinux[v]; ok {
				out = append(out, strings.ReplaceAll(linux, "linux", legacy))
			}
		}
	}
	return out
}

// musllinuxPlatforms mirrors packaging 21.3 _musllinux.platform_tags.
func musllinuxPlatforms(arch string, major, minor int) []string {
	var out []string
	for m := minor; m >= 0; m-- {
		out = append(out, fmt.Sprintf("musllinux_%d_%d_%s", major, m, arch))
	}
	return out
}

// platformArch returns the architecture of a Linux platform tag, or "" if s is not one:
// the group of `^(?:manylinux_2_[0-9]+|manylinux1|manylinux2010|manylinux2014|musllinux_1_[0-9]+|linux)_([a-z0-9_]+)$`,
// without a regular expression (see matchFloor).
func platformArch(s string) string {
	for _, p := range []string{"manylinux1_", "manylinux2010_", "manylinux2014_", "linux_"} {
		if rest, ok := strings.CutPrefix(s, p); ok && isArchName(rest) {
			return rest
		}
	}
	for _, p := range []string{"manylinux_2_", "musllinux_1_"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			if _, arch, ok := cutDigits(rest); ok && isArchName(arch) {
				return arch
			}
		}
	}
	return ""
}

var glibcRE = lazyre.New(`^([0-9]+)\.([0-9]+)`)

// parseGlibcVersion mirrors _manylinux._parse_glibc_version: the leading
// "major.minor", ignoring any vendor suffix; ok is false when there is none.
func parseGlibcVersion(s string) (major, minor int, ok bool) {
	m := glibcRE().FindStringSubmatch(s)
	if m == nil {
		return -1, -1, false
	}
	a, err1 := strconv.Atoi(m[1])
	b, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil {
		return -1, -1, false
	}
	return a, b, true
}

var muslVersionRE = lazyre.New(`^Version ([0-9]+)\.([0-9]+)`)

// parseMuslVersion mirrors _musllinux._parse_musl_version over the stderr of
// the musl dynamic loader.
func parseMuslVersion(output string) (major, minor int, ok bool) {
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(output, "\r\n", "\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "musl") {
		return 0, 0, false
	}
	m := muslVersionRE().FindStringSubmatch(lines[1])
	if m == nil {
		return 0, 0, false
	}
	a, err1 := strconv.Atoi(m[1])
	b, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return a, b, true
}
