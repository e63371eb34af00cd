package interp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
)

// MountPath is where every sandbox mounts the interpreter prefix.
const MountPath = "/opt/python"

// SourcePrefix is Config.Source for an artifact built from a prefix directory.
const SourcePrefix = "prefix"

// MaxConfigBytes bounds the config blob; real ones are a few tens of KiB.
const MaxConfigBytes = 1 << 20

// ErrInvalidConfig: config bytes that are not a valid, canonical interpreter config.
var ErrInvalidConfig = errors.New("invalid interpreter config")

// Config is the config blob of an interpreter artifact.
type Config struct {
	Version        string            `json:"version"`        // "3.11.2"
	Implementation string            `json:"implementation"` // "cp"
	ABI            string            `json:"abi"`            // "cp311"
	Platform       string            `json:"platform"`       // the most specific platform tag, e.g. manylinux_2_36_x86_64
	Platforms      []string          `json:"platforms"`      // every platform tag, most specific first
	Tags           []string          `json:"tags"`           // every supported wheel tag, most preferred first (pip's order)
	Markers        map[string]string `json:"markers"`        // PEP 508 marker environment; platform_release and platform_version are ""
	MountPath      string            `json:"mount_path"`     // MountPath
	Source         string            `json:"source"`         // SourcePrefix, or the file name of the tarball it was built from
	Tree           string            `json:"tree"`           // the prefix's bytes: oci.TreeDigest of it, the diff ID of the layer blob
}

// configFromTarget fills a Config from a probed target. The kernel's
// platform_release and platform_version describe the build host, not the
// interpreter, and would give the same prefix a different key on every
// kernel; they are blanked, as in every lock target made with --python.
func configFromTarget(t target.Target, source string) Config {
	markers := make(map[string]string, len(t.Markers))
	for k, v := range t.Markers {
		markers[k] = v
	}
	markers["platform_release"] = ""
	markers["platform_version"] = ""
	tags := t.Tags()
	strs := make([]string, len(tags))
	for i, tg := range tags {
		strs[i] = tg.String()
	}
	return Config{
		Version:        t.PythonFull,
		Implementation: t.Implementation,
		ABI:            t.ABI,
		Platform:       t.Platform,
		Platforms:      slices.Clone(t.Platforms),
		Tags:           strs,
		Markers:        markers,
		MountPath:      MountPath,
		Source:         source,
	}
}

// Target returns the lock target of the interpreter: what packages layered
// on it must be built for. The error wraps ErrInvalidConfig.
func (c Config) Target() (target.Target, error) {
	minor, _, ok := strings.Cut(strings.TrimPrefix(c.Version, "3."), ".")
	if !ok || !strings.HasPrefix(c.Version, "3.") {
		return target.Target{}, fmt.Errorf("%w: version %q is not 3.MINOR.PATCH", ErrInvalidConfig, c.Version)
	}
	t := target.Target{
		Python:         "3." + minor,
		PythonFull:     c.Version,
		Implementation: c.Implementation,
		ABI:            c.ABI,
		Platform:       c.Platform,
		Platforms:      slices.Clone(c.Platforms),
		Markers:        c.Markers,
	}
	if err := t.Validate(); err != nil {
		return target.Target{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return t, nil
}

// Python is the major.minor version, e.g. "3.11" (the dev.pylayer.python annotation).
func (c Config) Python() string {
	t, err := c.Target()
	if err != nil {
		return ""
	}
	return t.Python
}

// Validate checks that c is complete and self-consistent: a valid target,
// Tags exactly the tags of that target, MountPath the fixed mount path, and
// Source a plain file name. Errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	t, err := c.Target()
	if err != nil {
		return err
	}
	if c.Markers["platform_release"] != "" || c.Markers["platform_version"] != "" {
		return fmt.Errorf("%w: platform_release and platform_version must be empty: they describe a kernel, not the interpreter", ErrInvalidConfig)
	}
	want := t.Tags()
	if len(want) != len(c.Tags) {
		return fmt.Errorf("%w: %d tags, the target supports %d", ErrInvalidConfig, len(c.Tags), len(want))
	}
	for i, tg := range want {
		if c.Tags[i] != tg.String() {
			return fmt.Errorf("%w: tags[%d] is %q, want %q", ErrInvalidConfig, i, c.Tags[i], tg)
		}
	}
	if c.MountPath != MountPath {
		return fmt.Errorf("%w: mount_path %q, want %q", ErrInvalidConfig, c.MountPath, MountPath)
	}
	if d, err := digest.Parse(c.Tree); err != nil || d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%w: tree %q must be the sha256 digest of the prefix (sha256:<64 hex>)", ErrInvalidConfig, c.Tree)
	}
	if c.Source == "" || c.Source == "." || c.Source == ".." || strings.ContainsAny(c.Source, "/\\\x00") || path.Clean(c.Source) != c.Source {
		return fmt.Errorf("%w: source %q must be %q or a file name", ErrInvalidConfig, c.Source, SourcePrefix)
	}
	return nil
}

// Canonical returns the config blob bytes of c: compact JSON with fields in
// declaration order and marker keys sorted. It validates c first.
func (c Config) Canonical() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding interpreter config: %w", err)
	}
	return b, nil
}

// KeyOf is the key of config bytes: their lowercase hex sha256.
func KeyOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// ParseConfig decodes a config blob. It accepts only valid configs in
// canonical form (what Canonical writes), so that one interpreter has exactly
// one key. Errors wrap ErrInvalidConfig.
func ParseConfig(b []byte) (Config, error) {
	if len(b) > MaxConfigBytes {
		return Config{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidConfig, len(b), MaxConfigBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: decoding JSON: %v", ErrInvalidConfig, err)
	}
	canon, err := c.Canonical()
	if err != nil {
		return Config{}, err
	}
	if !bytes.Equal(canon, b) {
		return Config{}, fmt.Errorf("%w: not in canonical form (compact JSON, fields in order, no trailing data)", ErrInvalidConfig)
	}
	return c, nil
}

// TagFor is the registry tag of the interpreter artifact with config c:
// "cpython-<version>-<key>", the key covering the tree digest (two prefixes of one
// version have two tags), with any character a tag cannot hold (the "+" of
// a development version) replaced by "_". It is at most 128 characters for
// any real version; an absurdly long one is an error.
func TagFor(c Config) (string, error) {
	canon, err := c.Canonical()
	if err != nil {
		return "", err
	}
	v := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, c.Version)
	tag := "cpython-" + v + "-" + KeyOf(canon)
	if err := oci.ValidTag(tag); err != nil {
		return "", fmt.Errorf("%w: version %q makes no valid tag: %w", ErrInvalidConfig, c.Version, err)
	}
	return tag, nil
}
