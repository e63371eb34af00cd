package native

import (
	"strconv"
	"strings"
)

// The libraries that auditwheel's policy (manylinux-policy.json, "lib_whitelist")
// lets a manylinux wheel take from the system, by the oldest glibc policy that added
// them: manylinux_2_5 (manylinux1) has the base set, manylinux_2_12 (manylinux2010)
// adds libexpat, manylinux_2_24 adds libmvec; every later policy up to manylinux_2_41
// has the same list. musllinux_1_1 and _1_2 allow libc.so and libz.so.1.
var (
	manylinuxBase = []string{
		"libGL.so.1", "libICE.so.6", "libSM.so.6", "libX11.so.6", "libXext.so.6",
		"libXrender.so.1", "libanl.so.1", "libatomic.so.1", "libc.so.6", "libdl.so.2",
		"libgcc_s.so.1", "libglib-2.0.so.0", "libgobject-2.0.so.0", "libgthread-2.0.so.0",
		"libm.so.6", "libnsl.so.1", "libpthread.so.0", "libresolv.so.2", "librt.so.1",
		"libstdc++.so.6", "libutil.so.1", "libz.so.1",
	}
	manylinuxSince = map[string]int{ // soname: the glibc minor version whose policy added it
		"libexpat.so.1": 12,
		"libmvec.so.1":  24,
	}
	musllinux = []string{"libc.so", "libz.so.1"}
)

// newestGlibcMinor stands for "any glibc": a linux_ARCH platform says nothing about
// the C library's version, so it gets the newest manylinux policy's list.
const newestGlibcMinor = 1 << 30

// Allowed reports whether a library with this soname may be taken from the system on
// platform, a wheel platform tag or a target's floor with or without its architecture:
// "manylinux_2_28_x86_64", "manylinux_2_17", "manylinux2014_aarch64",
// "musllinux_1_2_x86_64", "linux_x86_64". A linux_ARCH platform (a glibc system of
// unknown version) is treated as the newest manylinux policy. The dynamic loader
// itself (ld-linux-*.so.*, ld64.so.*, ld-musl-*.so.1) is always allowed: it is what
// loads everything else. An unknown platform allows nothing.
func Allowed(platform, soname string) bool {
	kind, minor, ok := parsePlatform(platform)
	if !ok {
		return false
	}
	switch kind {
	case "musllinux":
		if strings.HasPrefix(soname, "ld-musl-") {
			return true
		}
		for _, s := range musllinux {
			if s == soname {
				return true
			}
		}
		return false
	default: // manylinux, linux
		if strings.HasPrefix(soname, "ld-linux") || strings.HasPrefix(soname, "ld64.so.") {
			return true
		}
		if since, ok := manylinuxSince[soname]; ok {
			return minor >= since
		}
		for _, s := range manylinuxBase {
			if s == soname {
				return true
			}
		}
		return false
	}
}

// PolicyName is how a report names platform's allow-list: "manylinux_2_28",
// "musllinux_1_2", "manylinux" for a linux_ARCH platform; platform itself when it is
// not one Allowed knows.
func PolicyName(platform string) string {
	kind, minor, ok := parsePlatform(platform)
	switch {
	case !ok:
		return platform
	case kind == "linux":
		return "manylinux"
	case kind == "musllinux":
		return "musllinux_1_" + strconv.Itoa(minor)
	default:
		return "manylinux_2_" + strconv.Itoa(minor)
	}
}

// parsePlatform returns the policy family of platform and its C library's minor
// version (glibc 2.minor, musl 1.minor).
func parsePlatform(p string) (kind string, minor int, ok bool) {
	for alias, m := range map[string]int{"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17} {
		if p == alias || strings.HasPrefix(p, alias+"_") {
			return "manylinux", m, true
		}
	}
	if p == "linux" || strings.HasPrefix(p, "linux_") {
		return "linux", newestGlibcMinor, true
	}
	for _, k := range []string{"manylinux", "musllinux"} {
		rest, found := strings.CutPrefix(p, k+"_")
		if !found {
			continue
		}
		f := strings.SplitN(rest, "_", 3) // major, minor, arch (itself may hold "_")
		if len(f) < 2 {
			return "", 0, false
		}
		major, err1 := strconv.Atoi(f[0])
		minor, err2 := strconv.Atoi(f[1])
		want := map[string]int{"manylinux": 2, "musllinux": 1}[k]
		if err1 != nil || err2 != nil || major != want || minor < 0 {
			return "", 0, false
		}
		if k == "manylinux" && minor < 5 {
			return "", 0, false // no policy is older than manylinux1's glibc 2.5
		}
		return k, minor, true
	}
	return "", 0, false
}
