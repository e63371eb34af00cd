package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Platform is where an artifact runs: the OCI platform of its entry in a PlatformIndex
// (os, architecture, variant, as Go and OCI name them) and the C library its wheels
// were built for, which OCI platforms do not name (the entry's dev.pylayer.libc).
type Platform struct {
	OS           string // "linux"
	Architecture string // GOARCH: "amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64"
	Variant      string // "v7" for arm; "" otherwise
	Libc         string // LibcGlibc or LibcMusl
}

// The C libraries of Platform.Libc.
const (
	LibcGlibc = "glibc" // manylinux_* and linux_* wheels
	LibcMusl  = "musl"  // musllinux_* wheels
)

// AnnotationLibc is the annotation of an index entry naming its Platform.Libc.
const AnnotationLibc = "dev.pylayer.libc"

// ErrUnknownPlatform: a wheel platform tag or a platform string pylayer cannot map to an
// OCI platform.
var ErrUnknownPlatform = errors.New("unknown platform")

// wheelArches maps the machine of a wheel platform tag to GOARCH and the OCI variant.
var wheelArches = []struct{ machine, arch, variant string }{
	{"x86_64", "amd64", ""},
	{"aarch64", "arm64", ""},
	{"i686", "386", ""},
	{"armv7l", "arm", "v7"},
	{"ppc64le", "ppc64le", ""},
	{"s390x", "s390x", ""},
	{"riscv64", "riscv64", ""},
}

// PlatformOf maps a wheel platform tag (a lock target's platform, the dev.pylayer.platform
// annotation) to its Platform: manylinux_2_28_x86_64 is linux/amd64 with glibc,
// musllinux_1_2_aarch64 linux/arm64 with musl, linux_armv7l linux/arm/v7 with glibc.
// Errors wrap ErrUnknownPlatform.
func PlatformOf(tag string) (Platform, error) {
	var libc string
	switch {
	case strings.HasPrefix(tag, "manylinux"), strings.HasPrefix(tag, "linux_"):
		libc = LibcGlibc
	case strings.HasPrefix(tag, "musllinux_"):
		libc = LibcMusl
	default:
		return Platform{}, fmt.Errorf("%w: wheel platform %q is not a manylinux, musllinux or linux tag", ErrUnknownPlatform, tag)
	}
	for _, a := range wheelArches {
		if strings.HasSuffix(tag, "_"+a.machine) {
			return Platform{OS: "linux", Architecture: a.arch, Variant: a.variant, Libc: libc}, nil
		}
	}
	return Platform{}, fmt.Errorf("%w: wheel platform %q names no machine pylayer knows (x86_64, aarch64, i686, armv7l, ppc64le, s390x, riscv64)", ErrUnknownPlatform, tag)
}

// ParsePlatform reads the syntax of String: "os/arch[/variant][+libc]", e.g. linux/amd64,
// linux/arm64+musl, linux/arm/v7. A platform without "+libc" is glibc's. Errors wrap
// ErrUnknownPlatform.
func ParsePlatform(s string) (Platform, error) {
	bad := func(why string) (Platform, error) {
		return Platform{}, fmt.Errorf("%w: %q: %s (write os/arch[/variant][+musl], e.g. linux/arm64)", ErrUnknownPlatform, s, why)
	}
	p := Platform{Libc: LibcGlibc}
	rest, libc, ok := strings.Cut(s, "+")
	if ok {
		if libc != LibcGlibc && libc != LibcMusl {
			return bad("the C library must be glibc or musl")
		}
		p.Libc = libc
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("not os/arch or os/arch/variant")
	}
	for _, x := range parts {
		if x == "" || strings.ToLower(x) != x || strings.ContainsAny(x, " \t+") {
			return bad("an empty or upper-case component")
		}
	}
	p.OS, p.Architecture = parts[0], parts[1]
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	if p.OS != "linux" {
		return bad("pylayer artifacts run on linux only")
	}
	return p, nil
}

// String is "os/arch[/variant]", with "+musl" for musl: what ParsePlatform reads.
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	if p.Libc != "" && p.Libc != LibcGlibc {
		s += "+" + p.Libc
	}
	return s
}

// less orders platforms by os, architecture, variant, then libc.
func (p Platform) less(q Platform) bool {
	if p.OS != q.OS {
		return p.OS < q.OS
	}
	if p.Architecture != q.Architecture {
		return p.Architecture < q.Architecture
	}
	if p.Variant != q.Variant {
		return p.Variant < q.Variant
	}
	return p.Libc < q.Libc
}

// HostPlatform is the platform of this host: runtime.GOOS and GOARCH (arm is taken as
// v7), with musl when the host has musl's dynamic loader and glibc otherwise.
func HostPlatform() Platform {
	p := Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH, Libc: LibcGlibc}
	if p.Architecture == "arm" {
		p.Variant = "v7"
	}
	if m, _ := filepath.Glob("/lib/ld-musl-*.so.1"); len(m) > 0 {
		if _, err := os.Stat(m[0]); err == nil {
			p.Libc = LibcMusl
		}
	}
	return p
}
