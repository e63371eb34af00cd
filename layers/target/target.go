package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalidPython: a python version that is malformed or out of range.
	ErrInvalidPython = errors.New("invalid python version")
	// ErrInvalidPlatform: a platform floor or platform tag that is malformed.
	ErrInvalidPlatform = errors.New("invalid platform")
	// ErrInvalidTarget: a Target whose fields are missing or inconsistent.
	ErrInvalidTarget = errors.New("invalid target")
	// ErrUnsupported: a well-formed target pylayer cannot build for
	// (not CPython, not Linux, free-threaded, ...).
	ErrUnsupported = errors.New("unsupported target")
)

// Supported CPython minor versions (3.MinMinor .. 3.MaxMinor).
const (
	MinMinor = 8
	MaxMinor = 99
)

// MarkerKeys are the PEP 508 marker variables every Target carries, sorted.
var MarkerKeys = []string{
	"implementation_name", "implementation_version", "os_name",
	"platform_machine", "platform_python_implementation", "platform_release",
	"platform_system", "platform_version", "python_full_version",
	"python_version", "sys_platform",
}

// Target is what a lock is built for: interpreter version and ABI, the
// platform tags wheels may carry, and the PEP 508 marker environment. It is
// serialized inside every lock; its JSON is canonical (fixed field order,
// sorted marker keys) and decoding rejects unknown fields and invalid
// targets. Build one with FromFlags or Probe; never mutate a Target that is
// shared.
type Target struct {
	Python         string            `json:"python"`         // "3.11" (major.minor)
	PythonFull     string            `json:"python_full"`    // "3.11.7"
	Implementation string            `json:"implementation"` // "cp"
	ABI            string            `json:"abi"`            // "cp311", or "cp311d" for a debug build
	Platform       string            `json:"platform"`       // the floor, e.g. manylinux_2_28_x86_64; always Platforms[0]
	Platforms      []string          `json:"platforms"`      // ordered platform tags the tags are built over
	Markers        map[string]string `json:"markers"`        // full PEP 508 marker environment (MarkerKeys)
}

var pythonFlagRE = lazyre.New(`^3\.([0-9]+)(?:\.([0-9]+))?$`)

// pythonFullMinor returns the minor version of a python_full value, the first group of
// `^3\.([0-9]+)\.([0-9]+)(?:(?:a|b|rc)[0-9]+)?\+?$`, without a regular expression (every
// run validates its layers' targets; FuzzPlatformMatchers holds it to the pattern).
func pythonFullMinor(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, "3.")
	if !ok {
		return "", false
	}
	n := leadingDigits(rest)
	if n == 0 || n == len(rest) || rest[n] != '.' {
		return "", false
	}
	minor, rest := rest[:n], rest[n+1:]
	if n = leadingDigits(rest); n == 0 {
		return "", false
	}
	rest = strings.TrimSuffix(rest[n:], "+")
	if rest == "" {
		return minor, true
	}
	for _, pre := range []string{"a", "b", "rc"} {
		if r, ok := strings.CutPrefix(rest, pre); ok && r != "" && leadingDigits(r) == len(r) {
			return minor, true
		}
	}
	return "", false
}

// FromFlags builds a Target from a python version ("3.11" or "3.11.7") and a
// platform floor (manylinux_2_N_ARCH, musllinux_1_N_ARCH or linux_ARCH). It
// reads nothing from the host: the marker environment is the one of a CPython
// on Linux for that architecture, with platform_release and platform_version
// empty. A manylinux or musllinux floor expands to every older compatible
// platform tag, as pip does on such a system; linux_ARCH stays alone.
func FromFlags(python, platform string) (Target, error) {
	m := pythonFlagRE().FindStringSubmatch(python)
	if m == nil {
		return Target{}, fmt.Errorf("--python: %w %q: want 3.MINOR or 3.MINOR.PATCH, e.g. 3.11", ErrInvalidPython, python)
	}
	minor, ok := canonicalInt(m[1])
	if !ok || minor < MinMinor || minor > MaxMinor {
		return Target{}, fmt.Errorf("--python: %w %q: pylayer supports CPython 3.%d to 3.%d", ErrInvalidPython, python, MinMinor, MaxMinor)
	}
	full := python + ".0"
	if m[2] != "" {
		if _, ok := canonicalInt(m[2]); !ok {
			return Target{}, fmt.Errorf("--python: %w %q: patch version must be a plain decimal number", ErrInvalidPython, python)
		}
		full = python
		python = "3." + m[1]
	}
	f, err := parseFloor(platform)
	if err != nil {
		return Target{}, fmt.Errorf("--platform: %w", err)
	}
	t := Target{
		Python:         python,
		PythonFull:     full,
		Implementation: "cp",
		ABI:            "cp3" + strconv.Itoa(minor),
		Platform:       platform,
		Platforms:      f.expand(),
		Markers: map[string]string{
			"implementation_name":            "cpython",
			"implementation_version":         full,
			"os_name":                        "posix",
			"platform_machine":               f.arch,
			"platform_python_implementation": "CPython",
			"platform_release":               "",
			"platform_system":                "Linux",
			"platform_version":               "",
			"python_full_version":            full,
			"python_version":                 python,
			"sys_platform":                   "linux",
		},
	}
	if err := t.Validate(); err != nil {
		return Target{}, fmt.Errorf("building target from flags: %w", err)
	}
	return t, nil
}

// minor returns the 3.x minor version of t.Python.
func (t Target) minor() (int, bool) {
	rest, ok := strings.CutPrefix(t.Python, "3.")
	if !ok {
		return 0, false
	}
	n, ok := canonicalInt(rest)
	return n, ok && n >= MinMinor && n <= MaxMinor
}

// Validate reports whether t is complete and self-consistent. Errors wrap
// ErrInvalidTarget, ErrInvalidPython, ErrInvalidPlatform or ErrUnsupported.
func (t Target) Validate() error {
	minor, ok := t.minor()
	if !ok {
		return fmt.Errorf("%w: python %q: want 3.MINOR with 3.%d <= version <= 3.%d", ErrInvalidPython, t.Python, MinMinor, MaxMinor)
	}
	if m, ok := pythonFullMinor(t.PythonFull); !ok || m != strconv.Itoa(minor) {
		return fmt.Errorf("%w: python_full %q does not extend python %q", ErrInvalidPython, t.PythonFull, t.Python)
	}
	if t.Implementation != "cp" {
		return fmt.Errorf("%w: implementation %q: only CPython (\"cp\") is supported", ErrUnsupported, t.Implementation)
	}
	if want := "cp3" + strconv.Itoa(minor); t.ABI != want && t.ABI != want+"d" {
		return fmt.Errorf("%w: abi %q: want %s or %sd for python %s", ErrInvalidTarget, t.ABI, want, want, t.Python)
	}
	f, err := parseFloor(t.Platform)
	if err != nil {
		return fmt.Errorf("%w: platform: %w", ErrInvalidTarget, err)
	}
	if len(t.Platforms) == 0 || t.Platforms[0] != t.Platform {
		return fmt.Errorf("%w: platforms must start with the platform floor %q", ErrInvalidTarget, t.Platform)
	}
	if len(t.Platforms) > maxPlatforms {
		return fmt.Errorf("%w: %d platforms, at most %d allowed", ErrInvalidTarget, len(t.Platforms), maxPlatforms)
	}
	seen := make(map[string]bool, len(t.Platforms))
	for _, p := range t.Platforms {
		if a := platformArch(p); a != f.arch {
			return fmt.Errorf("%w: platform tag %q is not a Linux %s platform", ErrInvalidTarget, p, f.arch)
		}
		if seen[p] {
			return fmt.Errorf("%w: platform tag %q listed twice", ErrInvalidTarget, p)
		}
		seen[p] = true
	}
	return t.validateMarkers()
}

func (t Target) validateMarkers() error {
	var unknown []string
	for k := range t.Markers {
		if i := sort.SearchStrings(MarkerKeys, k); i == len(MarkerKeys) || MarkerKeys[i] != k {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%w: markers: unknown keys %q", ErrInvalidTarget, unknown)
	}
	for _, k := range MarkerKeys {
		if _, ok := t.Markers[k]; !ok {
			return fmt.Errorf("%w: markers: %s missing", ErrInvalidTarget, k)
		}
	}
	fixed := map[string]string{
		"python_version":                 t.Python,
		"python_full_version":            t.PythonFull,
		"implementation_name":            "cpython",
		"platform_python_implementation": "CPython",
		"os_name":                        "posix",
		"sys_platform":                   "linux",
		"platform_system":                "Linux",
	}
	for k, want := range fixed {
		if got := t.Markers[k]; got != want {
			return fmt.Errorf("%w: markers: %s is %q, want %q", ErrInvalidTarget, k, got, want)
		}
	}
	for _, k := range []string{"implementation_version", "platform_machine"} {
		if t.Markers[k] == "" {
			return fmt.Errorf("%w: markers: %s is empty", ErrInvalidTarget, k)
		}
	}
	return nil
}

// targetJSON has Target's fields without its methods, to avoid recursion.
type targetJSON Target

// MarshalJSON encodes a valid Target canonically; it refuses an invalid one
// so that no lock is ever written with a broken target.
func (t Target) MarshalJSON() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("encoding target: %w", err)
	}
	return json.Marshal(targetJSON(t))
}

// UnmarshalJSON decodes a Target strictly: unknown fields, trailing data and
// invalid targets are errors.
func (t *Target) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v targetJSON
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("decoding target: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("decoding target: trailing data")
	}
	if err := Target(v).Validate(); err != nil {
		return fmt.Errorf("decoding target: %w", err)
	}
	*t = Target(v)
	return nil
}

// String names the target for messages, e.g. "CPython 3.11.0 cp311 manylinux_2_28_x86_64".
func (t Target) String() string {
	return fmt.Sprintf("CPython %s %s %s", t.PythonFull, t.ABI, t.Platform)
}
