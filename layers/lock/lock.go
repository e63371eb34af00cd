package lock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/layers/wheel"
)

// FormatVersion is the lock format this package reads and writes.
const FormatVersion = 1

// Requested is the required_by entry of a package the user asked for directly.
const Requested = "(requested)"

// Kind is what a layer is for.
type Kind string

const (
	KindBase Kind = "base" // the curated base of every session
	KindExt  Kind = "ext"  // a delta stacked on one base
	KindIso  Kind = "iso"  // a full closure that replaces the base for one session

	// KindPython is the kind of an interpreter artifact (a CPython prefix), never of a
	// lock: ParseKind refuses it. It is here so that every package names kinds one way.
	KindPython Kind = "python"
)

// ParseKind checks a kind given by a user.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindBase, KindExt, KindIso:
		return k, nil
	}
	return "", fmt.Errorf("unknown layer kind %q: want base, ext or iso", s)
}

// Package is one pinned wheel.
type Package struct {
	Name       string   `json:"name"` // PEP 503-normalized
	Version    string   `json:"version"`
	Filename   string   `json:"filename"`
	URL        string   `json:"url,omitempty"` // provenance: where it was fetched; never part of the key
	SHA256     string   `json:"sha256"`
	Size       int64    `json:"size"`
	RequiredBy []string `json:"required_by"`
}

// Lock is a resolved layer. Build it, then call Canonical or Key; Parse gives one back.
type Lock struct {
	Version      int           `json:"version"`
	Kind         Kind          `json:"kind"`
	Base         string        `json:"base,omitempty"` // key of the base lock; ext only
	Target       target.Target `json:"target"`
	Requirements []string      `json:"requirements"`
	Constraints  []string      `json:"constraints,omitempty"`
	// CompiledBy names the interpreter that compiled the layer's .pyc (CompiledByOf's
	// form: "cpython-311 a70d0d0a 3.11.2 (main, ...) [GCC 12.2.0]"); "" for a layer
	// without .pyc. It is part of the key: the .pyc change the layer's bytes, so one key
	// has one digest. It is not part of what was resolved (ResolutionKey).
	CompiledBy string    `json:"compiled_by,omitempty"`
	Packages   []Package `json:"packages"`
}

// ErrInvalid is wrapped by every error about a lock's content.
var ErrInvalid = errors.New("invalid lock")

// isHexSHA256 reports whether s is a sha256 in lowercase hex, without a regular
// expression to compile on every command that validates a lock.
func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Normalize sorts what has no meaningful order, so equal locks have equal bytes.
func (l *Lock) Normalize() {
	sort.Slice(l.Packages, func(i, j int) bool { return l.Packages[i].Name < l.Packages[j].Name })
	for i := range l.Packages {
		rb := append([]string(nil), l.Packages[i].RequiredBy...)
		sort.Strings(rb)
		l.Packages[i].RequiredBy = dedupe(rb)
	}
	l.Requirements = dedupe(sorted(l.Requirements))
	l.Constraints = dedupe(sorted(l.Constraints))
	if l.Requirements == nil {
		l.Requirements = []string{}
	}
	if l.Packages == nil {
		l.Packages = []Package{}
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Validate checks that the lock is well formed and self-consistent.
func (l *Lock) Validate() error {
	if l.Version != FormatVersion {
		return invalid("format version %d, this pylayer reads version %d", l.Version, FormatVersion)
	}
	if _, err := ParseKind(string(l.Kind)); err != nil {
		return invalid("%v", err)
	}
	if l.Kind == KindExt && !isHexSHA256(l.Base) {
		return invalid("an ext lock needs the key of its base (64 hex digits), got %q", l.Base)
	}
	if l.Kind != KindExt && l.Base != "" {
		return invalid("only an ext lock names a base, this one is %s", l.Kind)
	}
	if err := l.Target.Validate(); err != nil {
		return invalid("target: %v", err)
	}
	if err := checkCompiledBy(l.CompiledBy, l.Target.Python); err != nil {
		return err
	}
	for _, r := range l.Requirements {
		if _, err := pep508.ParseRequirement(r); err != nil {
			return invalid("requirement %q: %v", r, err)
		}
	}
	for _, r := range l.Constraints {
		if _, err := pep508.ParseRequirement(r); err != nil {
			return invalid("constraint %q: %v", r, err)
		}
	}
	seen := map[string]bool{}
	for i, p := range l.Packages {
		where := fmt.Sprintf("packages[%d] (%s)", i, p.Name)
		if p.Name == "" || pep508.NormalizeName(p.Name) != p.Name {
			return invalid("%s: name must be PEP 503-normalized", where)
		}
		if seen[p.Name] {
			return invalid("%s: listed twice; a layer holds one version of each name", where)
		}
		seen[p.Name] = true
		v, err := pep440.Parse(p.Version)
		if err != nil {
			return invalid("%s: version: %v", where, err)
		}
		fn, err := wheel.ParseFilename(p.Filename)
		if err != nil {
			return invalid("%s: %v", where, err)
		}
		if fn.Project() != p.Name {
			return invalid("%s: wheel %s is not of this project", where, p.Filename)
		}
		if fv, err := pep440.Parse(fn.Version); err != nil || !fv.Equal(v) {
			return invalid("%s: wheel %s is not version %s", where, p.Filename, p.Version)
		}
		if !isHexSHA256(p.SHA256) {
			return invalid("%s: sha256 must be 64 lowercase hex digits", where)
		}
		if p.Size <= 0 {
			return invalid("%s: size must be positive", where)
		}
		if p.URL != "" && hasUserinfo(p.URL) {
			return invalid("%s: url must carry no credentials", where)
		}
		if len(p.RequiredBy) == 0 {
			return invalid("%s: required_by is empty", where)
		}
	}
	return nil
}

func hasUserinfo(raw string) bool {
	u, err := url.Parse(raw)
	return err != nil || u.User != nil
}

// Canonical is the lock's canonical bytes: normalized, indented JSON with a final newline.
// They are what pylayer writes as a lock file, URLs included; the key is computed over
// Content, the same bytes without the URLs.
func (l *Lock) Canonical() ([]byte, error) {
	c, err := l.normalized()
	if err != nil {
		return nil, err
	}
	return c.encode()
}

// normalized is a normalized copy of l (its packages copied, l untouched), validated.
func (l *Lock) normalized() (*Lock, error) {
	c := *l
	c.Packages = append([]Package(nil), l.Packages...)
	c.Normalize()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// encode writes l as Canonical does, as it is.
func (l *Lock) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Content is the canonical bytes of the lock without its provenance: every package URL
// is dropped. It is what a layer is (the same wheels by name, version, file name and
// sha256, for the same target, kind, base and requirements), whichever index served
// them, and the key is computed over exactly these bytes. A lock read back from Content
// parses and has the same key.
func (l *Lock) Content() ([]byte, error) {
	c, err := l.normalized() // the URLs too must be valid
	if err != nil {
		return nil, err
	}
	// Validated once, with the URLs: dropping them leaves a valid lock (an empty URL is
	// valid), already normalized.
	for i := range c.Packages {
		c.Packages[i].URL = ""
	}
	return c.encode()
}

// Key is the sha256 (hex) of Content: index URLs are provenance, outside the key; the
// compiling interpreter (CompiledBy) is inside it.
func (l *Lock) Key() (string, error) {
	b, err := l.Content()
	if err != nil {
		return "", err
	}
	return KeyOf(b), nil
}

// ResolutionKey is the key of what was resolved: Key with CompiledBy left out. Which
// interpreter compiles a layer's .pyc changes its bytes but not its wheels, so an ext
// lock names its base by the base's ResolutionKey (Base), and the base layer fits it
// whichever interpreter compiled it. For a lock without CompiledBy it equals Key.
func (l *Lock) ResolutionKey() (string, error) {
	c := *l
	c.CompiledBy = ""
	return c.Key()
}

// maxCompiledBy bounds CompiledBy; real ones are under a hundred bytes.
const maxCompiledBy = 256

// CompiledByOf is the CompiledBy of an interpreter from what it reports:
// sys.implementation.cache_tag, importlib.util.MAGIC_NUMBER in hex and sys.version
// (whose runs of white space become one space).
func CompiledByOf(cacheTag, magic, version string) string {
	return cacheTag + " " + magic + " " + strings.Join(strings.Fields(version), " ")
}

// compiledByTag matches `^(cpython-3[0-9]+) [0-9a-f]{8} [!-~]+( [!-~]+)*$` and returns
// its group, the cache tag, without a regular expression: every run validates its layers'
// locks, and compiling the pattern cost more than the rest of the check
// (FuzzCompiledByTag holds it to the pattern).
func compiledByTag(s string) (string, bool) {
	tag, rest, ok := strings.Cut(s, " ")
	minor, isCP := strings.CutPrefix(tag, "cpython-3")
	if !ok || !isCP || minor == "" || strings.Trim(minor, "0123456789") != "" {
		return "", false
	}
	magic, version, ok := strings.Cut(rest, " ")
	if !ok || len(magic) != 8 || strings.Trim(magic, "0123456789abcdef") != "" || version == "" {
		return "", false
	}
	for _, word := range strings.Split(version, " ") {
		if word == "" {
			return "", false
		}
		for i := 0; i < len(word); i++ {
			if word[i] < '!' || word[i] > '~' {
				return "", false
			}
		}
	}
	return tag, true
}

// checkCompiledBy checks that s is "" or CompiledByOf an interpreter of python ("3.11"):
// .pyc from another minor version would never be loaded.
func checkCompiledBy(s, python string) error {
	if s == "" {
		return nil
	}
	tag, ok := compiledByTag(s)
	if !ok || len(s) > maxCompiledBy {
		return invalid("compiled_by %q: want \"CACHE_TAG MAGIC SYS.VERSION\" (e.g. \"cpython-311 a70d0d0a 3.11.2 ...\"), printable ASCII, at most %d bytes", s, maxCompiledBy)
	}
	if want := "cpython-" + strings.ReplaceAll(python, ".", ""); tag != want {
		return invalid("compiled_by %q: the .pyc of a python %s layer must be compiled by a python %s interpreter (%s)", s, python, python, want)
	}
	return nil
}

// KeyOf is the key of content bytes (what Content returns): their sha256 in hex.
func KeyOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// MaxBytes bounds a lock file; real locks are a few hundred KiB at most.
const MaxBytes = 16 << 20

// Parse reads a lock strictly: unknown fields, trailing data and invalid content are errors.
// The bytes need not be canonical (a reformatted lock has the same key).
func Parse(b []byte) (*Lock, error) {
	if len(b) > MaxBytes {
		return nil, invalid("%d bytes, more than the %d a lock may have", len(b), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l Lock
	if err := dec.Decode(&l); err != nil {
		return nil, invalid("%v", err)
	}
	if dec.More() {
		return nil, invalid("trailing data after the lock object")
	}
	l.Normalize()
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &l, nil
}

// ReadFile parses the lock at path.
func ReadFile(path string) (*Lock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading lock: %w", err)
	}
	l, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// WriteFile writes the canonical lock (URLs included) to path atomically (temp file,
// fsync, rename) and returns its key. On error nothing is left at path or beside it.
func WriteFile(path string, l *Lock) (string, error) {
	b, err := l.Canonical()
	if err != nil {
		return "", err
	}
	key, err := l.Key()
	if err != nil {
		return "", err
	}
	if err := WriteAtomic(path, b, 0o644); err != nil {
		return "", fmt.Errorf("writing lock: %w", err)
	}
	return key, nil
}

// WriteAtomic writes data to path atomically and durably: fsx.WriteFile, for callers
// without a context.
func WriteAtomic(path string, data []byte, mode os.FileMode) error {
	return fsx.WriteFile(context.Background(), path, data, mode)
}

// Find returns the package named name (normalized), or nil.
func (l *Lock) Find(name string) *Package {
	for i := range l.Packages {
		if l.Packages[i].Name == name {
			return &l.Packages[i]
		}
	}
	return nil
}

// Tag is the artifact tag of the lock's layer: <kind>-<key>.
func (l *Lock) Tag() (tag, key string, err error) {
	if key, err = l.Key(); err != nil {
		return "", "", err
	}
	return string(l.Kind) + "-" + key, key, nil
}
