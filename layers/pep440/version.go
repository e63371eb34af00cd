package pep440

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// ErrInvalidVersion is returned (wrapped) for strings that are not PEP 440
// versions.
var ErrInvalidVersion = errors.New("invalid PEP 440 version")

// versionRE is packaging 21.3's VERSION_PATTERN, anchored. Go's regexp uses
// the same leftmost-first semantics as Python's re, so the submatches agree.
// Surrounding whitespace is stripped before matching.
var versionRE = lazyre.New(`(?i)^v?` +
	`(?:(?:(?P<epoch>[0-9]+)!)?` +
	`(?P<release>[0-9]+(?:\.[0-9]+)*)` +
	`(?P<pre>[-_\.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_\.]?(?P<pre_n>[0-9]+)?)?` +
	`(?P<post>(?:-(?P<post_n1>[0-9]+))|(?:[-_\.]?(?P<post_l>post|rev|r)[-_\.]?(?P<post_n2>[0-9]+)?))?` +
	`(?P<dev>[-_\.]?(?P<dev_l>dev)[-_\.]?(?P<dev_n>[0-9]+)?)?)` +
	`(?:\+(?P<local>[a-z0-9]+(?:[-_\.][a-z0-9]+)*))?$`)

// reGroup maps versionRE's group names to submatch indexes, built with versionRE on first
// use: at package initialisation it would compile versionRE for every command.
var reGroup = sync.OnceValue(func() map[string]int {
	m := map[string]int{}
	for i, n := range versionRE().SubexpNames() {
		if n != "" {
			m[n] = i
		}
	}
	return m
})

// Version is a parsed PEP 440 version. It is immutable; compare versions
// with Compare or Equal, never with ==. The zero Version is not valid.
type Version struct {
	epoch   int
	release []int
	preL    string // "", "a", "b" or "rc"
	preN    int
	post    int // -1: none
	dev     int // -1: none
	local   []localPart
}

// localPart is one dot-separated local segment. Numeric parts hold their
// decimal digits without leading zeros ("0" for zero), so that arbitrary
// large values compare correctly.
type localPart struct {
	s   string
	num bool
}

// Parse parses a PEP 440 version in any spelling packaging accepts: a
// leading "v", "-", "_" or "." separators, any case, alternative spellings
// ("alpha", "preview", "rev", ...), implicit numbers ("1.0a" = "1.0a0") and
// implicit post releases ("1.0-1" = "1.0.post1").
func Parse(s string) (Version, error) {
	t := TrimSpace(s)
	if !isASCII(t) {
		return Version{}, fmt.Errorf("parsing version %q: %w: only ASCII is allowed", s, ErrInvalidVersion)
	}
	if isRelease(t) {
		return parseRelease(s, t)
	}
	return parseRE(s, t)
}

// isRelease reports whether t is a bare release, N(.N)*, as a lock's versions mostly
// are: Parse reads those without versionRE, whose compiling and first match cost about
// 0.2 ms of every command that validates a lock (a session's start among them).
func isRelease(t string) bool {
	if t == "" || t[0] == '.' || t[len(t)-1] == '.' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c == '.' {
			if t[i-1] == '.' {
				return false
			}
		} else if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseRelease is Parse of a bare release t (isRelease), trimmed from s: the Version
// versionRE's match would give.
func parseRelease(s, t string) (Version, error) {
	v := Version{post: -1, dev: -1, release: make([]int, 0, strings.Count(t, ".")+1)}
	for _, p := range strings.Split(t, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return Version{}, fmt.Errorf("parsing version %q: %w: number %s is too large", s, ErrInvalidVersion, p)
		}
		v.release = append(v.release, n)
	}
	return v, nil
}

// parseRE is Parse of t, trimmed from s, by versionRE.
func parseRE(s, t string) (Version, error) {
	m := versionRE().FindStringSubmatch(t)
	if m == nil {
		return Version{}, fmt.Errorf("parsing version %q: %w", s, ErrInvalidVersion)
	}
	groups := reGroup()
	g := func(name string) string { return m[groups[name]] }
	var v Version
	var err error
	num := func(d string) int {
		if err != nil {
			return 0
		}
		n, e := strconv.Atoi(d)
		if e != nil {
			err = fmt.Errorf("parsing version %q: %w: number %s is too large", s, ErrInvalidVersion, d)
		}
		return n
	}
	if e := g("epoch"); e != "" {
		v.epoch = num(e)
	}
	for _, p := range strings.Split(g("release"), ".") {
		v.release = append(v.release, num(p))
	}
	v.post, v.dev = -1, -1
	if l := g("pre_l"); l != "" {
		switch strings.ToLower(l) {
		case "a", "alpha":
			v.preL = "a"
		case "b", "beta":
			v.preL = "b"
		default: // c, rc, pre, preview
			v.preL = "rc"
		}
		v.preN = numOrZero(g("pre_n"), num)
	}
	if n := g("post_n1"); n != "" {
		v.post = num(n)
	} else if g("post_l") != "" {
		v.post = numOrZero(g("post_n2"), num)
	}
	if g("dev_l") != "" {
		v.dev = numOrZero(g("dev_n"), num)
	}
	if l := g("local"); l != "" {
		for _, p := range strings.FieldsFunc(l, func(r rune) bool { return r == '.' || r == '-' || r == '_' }) {
			if isDigits(p) {
				p = strings.TrimLeft(p, "0")
				if p == "" {
					p = "0"
				}
				v.local = append(v.local, localPart{s: p, num: true})
			} else {
				v.local = append(v.local, localPart{s: strings.ToLower(p)})
			}
		}
	}
	if err != nil {
		return Version{}, err
	}
	return v, nil
}

func numOrZero(d string, num func(string) int) int {
	if d == "" {
		return 0
	}
	return num(d)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// MustParse is Parse that panics on error, for constants in code and tests.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

// String returns the normalized form, the same as
// str(packaging.version.Version(s)).
func (v Version) String() string {
	var b strings.Builder
	b.WriteString(v.Public())
	if len(v.local) > 0 {
		b.WriteByte('+')
		b.WriteString(v.Local())
	}
	return b.String()
}

// Public returns the normalized version without its local segment.
func (v Version) Public() string {
	var b strings.Builder
	b.WriteString(v.BaseVersion())
	if v.preL != "" {
		b.WriteString(v.preL)
		b.WriteString(strconv.Itoa(v.preN))
	}
	if v.post >= 0 {
		b.WriteString(".post")
		b.WriteString(strconv.Itoa(v.post))
	}
	if v.dev >= 0 {
		b.WriteString(".dev")
		b.WriteString(strconv.Itoa(v.dev))
	}
	return b.String()
}

// BaseVersion returns the epoch and release segment only, e.g. "1!2.0".
func (v Version) BaseVersion() string {
	var b strings.Builder
	if v.epoch != 0 {
		b.WriteString(strconv.Itoa(v.epoch))
		b.WriteByte('!')
	}
	for i, r := range v.release {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}

// Local returns the normalized local segment ("" if there is none).
func (v Version) Local() string {
	parts := make([]string, len(v.local))
	for i, p := range v.local {
		parts[i] = p.s
	}
	return strings.Join(parts, ".")
}

// Epoch returns the epoch (0 if not written).
func (v Version) Epoch() int { return v.epoch }

// Release returns a copy of the release segment.
func (v Version) Release() []int { return append([]int(nil), v.release...) }

// IsPrerelease reports whether v has a pre-release or dev segment, as
// packaging's Version.is_prerelease.
func (v Version) IsPrerelease() bool { return v.preL != "" || v.dev >= 0 }

// IsPostRelease reports whether v has a post-release segment.
func (v Version) IsPostRelease() bool { return v.post >= 0 }

// IsDevRelease reports whether v has a dev segment.
func (v Version) IsDevRelease() bool { return v.dev >= 0 }

// Equal reports whether v and o are the same version under PEP 440
// (Compare == 0; "1.0" equals "1.0.0").
func (v Version) Equal(o Version) bool { return v.Compare(o) == 0 }

// MarshalText implements encoding.TextMarshaler with the normalized form.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (v *Version) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// withoutLocal returns v with its local segment dropped
// (Version(v.public) in packaging).
func (v Version) withoutLocal() Version {
	v.local = nil
	return v
}

// base returns v's epoch and release only (Version(v.base_version)).
func (v Version) base() Version {
	return Version{epoch: v.epoch, release: v.release, post: -1, dev: -1}
}
