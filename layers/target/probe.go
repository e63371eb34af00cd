package target

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed probe.py
var probeScript string

// ProbeTimeout bounds one Probe run when ctx has no earlier deadline.
const ProbeTimeout = 30 * time.Second

const maxProbeOutput = 1 << 20

// probeFacts is what probe.py prints.
type probeFacts struct {
	Version          []int             `json:"version"`
	Implementation   string            `json:"implementation"`
	PyDebug          *int              `json:"py_debug"`
	GILDisabled      *int              `json:"gil_disabled"`
	HasRefcount      bool              `json:"has_refcount"`
	HasDPyd          bool              `json:"has_d_pyd"`
	SOABI            *string           `json:"soabi"`
	ABIFlags         string            `json:"abiflags"`
	Is32Bit          bool              `json:"is_32bit"`
	SysconfigPlat    string            `json:"sysconfig_platform"`
	Glibc            *string           `json:"glibc"`
	ELF              *elfFacts         `json:"elf"`
	MuslLoaderOutput *string           `json:"musl_loader_output"`
	ManylinuxModule  bool              `json:"manylinux_module"`
	Markers          map[string]string `json:"markers"`
}

type elfFacts struct {
	Class   int    `json:"class"`
	Data    int    `json:"data"`
	Machine int    `json:"machine"`
	Flags   uint32 `json:"flags"`
}

// Probe runs the CPython interpreter at the absolute path interpreter once
// (isolated: -I -S -B, so no bytecode is written into its prefix; environment
// cleared but PATH=/usr/bin:/bin, working directory /, bounded by ProbeTimeout) and returns the Target pip running
// on that interpreter would install for: its version, ABI, every platform tag
// of packaging's sys_tags() (manylinux down to the oldest for the arch, or
// musllinux down to 1_0, then linux_ARCH) and its marker environment.
// Platform is the most specific platform tag found. Probe is explicit: the
// build host is never probed behind the caller's back.
func Probe(ctx context.Context, interpreter string) (Target, error) {
	if !filepath.IsAbs(interpreter) {
		return Target{}, fmt.Errorf("probing %q: interpreter must be an absolute path", interpreter)
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	out, err := runProbe(ctx, interpreter)
	if err != nil {
		return Target{}, fmt.Errorf("probing %s: %w", interpreter, err)
	}
	var facts probeFacts
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&facts); err != nil {
		return Target{}, fmt.Errorf("probing %s: decoding probe output: %w", interpreter, err)
	}
	t, err := facts.target()
	if err != nil {
		return Target{}, fmt.Errorf("probing %s: %w", interpreter, err)
	}
	return t, nil
}

func runProbe(ctx context.Context, interpreter string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, interpreter, "-I", "-S", "-B", "-c", probeScript)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	stdout := &cappedBuffer{max: maxProbeOutput}
	stderr := &cappedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)
	err := cmd.Run()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, fmt.Errorf("interpreter did not answer: %w", ctxErr)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return nil, fmt.Errorf("running probe: %w: %s", err, lastLines(msg, 5))
		}
		return nil, fmt.Errorf("running probe: %w", err)
	}
	if stdout.overflow {
		return nil, fmt.Errorf("probe output exceeds %d bytes", maxProbeOutput)
	}
	return stdout.Bytes(), nil
}

// target turns probe facts into a Target, mirroring packaging 21.3.
func (f *probeFacts) target() (Target, error) {
	if f.Implementation != "cpython" {
		return Target{}, fmt.Errorf("%w: implementation %q: only CPython is supported", ErrUnsupported, f.Implementation)
	}
	if len(f.Version) != 2 || f.Version[0] != 3 || f.Version[1] < MinMinor || f.Version[1] > MaxMinor {
		return Target{}, fmt.Errorf("%w: python %v: pylayer supports CPython 3.%d to 3.%d", ErrUnsupported, f.Version, MinMinor, MaxMinor)
	}
	if (f.GILDisabled != nil && *f.GILDisabled != 0) || strings.Contains(f.ABIFlags, "t") {
		return Target{}, fmt.Errorf("%w: free-threaded CPython (abiflags %q): pip 23's tag logic would pick wheels it cannot load", ErrUnsupported, f.ABIFlags)
	}
	if f.ManylinuxModule {
		return Target{}, fmt.Errorf("%w: the interpreter has a _manylinux module overriding manylinux compatibility", ErrUnsupported)
	}
	if f.Markers["platform_system"] != "Linux" || !strings.HasPrefix(f.SysconfigPlat, "linux-") {
		return Target{}, fmt.Errorf("%w: platform %q: only Linux is supported", ErrUnsupported, f.SysconfigPlat)
	}
	minor := f.Version[1]
	// packaging._cpython_abis (3.8+: no pymalloc or ucs4 flags).
	abi := "cp3" + strconv.Itoa(minor)
	if (f.PyDebug != nil && *f.PyDebug != 0) || (f.PyDebug == nil && (f.HasRefcount || f.HasDPyd)) {
		abi += "d"
	}
	platforms, err := f.platforms()
	if err != nil {
		return Target{}, err
	}
	t := Target{
		Python:         "3." + strconv.Itoa(minor),
		PythonFull:     f.Markers["python_full_version"],
		Implementation: "cp",
		ABI:            abi,
		Platform:       platforms[0],
		Platforms:      platforms,
		Markers:        f.Markers,
	}
	if err := t.Validate(); err != nil {
		return Target{}, err
	}
	return t, nil
}

// platforms mirrors packaging 21.3 tags._linux_platforms.
func (f *probeFacts) platforms() ([]string, error) {
	linux := strings.NewReplacer(".", "_", "-", "_").Replace(f.SysconfigPlat)
	if f.Is32Bit {
		switch linux {
		case "linux_x86_64":
			linux = "linux_i686"
		case "linux_aarch64":
			linux = "linux_armv7l"
		}
	}
	_, arch, _ := strings.Cut(linux, "_")
	if !isKnownArch(arch) {
		return nil, fmt.Errorf("%w: architecture %q (known: %s)", ErrUnsupported, arch, strings.Join(knownArches, ", "))
	}
	var out []string
	if f.Glibc != nil && f.haveCompatibleABI(arch) {
		if major, minor, ok := parseGlibcVersion(*f.Glibc); ok {
			if major != 2 || minor > maxGlibcMinor {
				return nil, fmt.Errorf("%w: glibc %q", ErrUnsupported, *f.Glibc)
			}
			out = manylinuxPlatforms(linux, arch, major, minor)
		}
	}
	if f.MuslLoaderOutput != nil {
		if major, minor, ok := parseMuslVersion(*f.MuslLoaderOutput); ok {
			if major != 1 || minor > maxMuslMinor {
				return nil, fmt.Errorf("%w: musl %d.%d", ErrUnsupported, major, minor)
			}
			out = append(out, musllinuxPlatforms(arch, major, minor)...)
		}
	}
	return append(out, linux), nil
}

// haveCompatibleABI mirrors _manylinux._have_compatible_abi.
func (f *probeFacts) haveCompatibleABI(arch string) bool {
	const (
		elfClass32, elfData2LSB, emARM, em386 = 1, 1, 40, 3
		abiMask, abiVer5, floatHard           = 0xFF000000, 0x05000000, 0x00000400
	)
	e := f.ELF
	switch arch {
	case "armv7l":
		return e != nil && e.Class == elfClass32 && e.Data == elfData2LSB && e.Machine == emARM &&
			e.Flags&abiMask == abiVer5 && e.Flags&floatHard == floatHard
	case "i686":
		return e != nil && e.Class == elfClass32 && e.Data == elfData2LSB && e.Machine == em386
	}
	return manylinuxArches[arch]
}

// cappedBuffer keeps at most max bytes and records whether more were written.
// It deliberately does not embed bytes.Buffer: io.Copy would use the
// embedded ReadFrom and bypass the cap.
type cappedBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.overflow = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *cappedBuffer) String() string { return b.buf.String() }

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
