package catalog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
)

// ErrInvalid is wrapped by every error that reports a catalog that breaks
// the rules (a bad name, a specifier that does not parse, a name both
// allowed and denied, a negative cap, an unknown field).
var ErrInvalid = errors.New("invalid catalog")

// Rule allowlists one project, optionally only in a range of versions.
type Rule struct {
	Name string `json:"name" yaml:"name"`
	// Spec is an optional PEP 440 specifier set, e.g. ">=1,<3"; empty means
	// every final release (pre-releases only if the spec names one).
	Spec string `json:"spec,omitempty" yaml:"spec,omitempty"`
}

// Catalog is the package policy of a deployment. Build one with Load or
// Default, or by hand followed by Validate.
type Catalog struct {
	Base          []string `json:"base,omitempty" yaml:"base,omitempty"`                       // PEP 508 requirements of the curated base list
	Allow         []Rule   `json:"allow,omitempty" yaml:"allow,omitempty"`                     // allowlist; a name may appear in several rules (any may match)
	Deny          []string `json:"deny,omitempty" yaml:"deny,omitempty"`                       // project names, normalized on load
	MaxWheelBytes int64    `json:"max_wheel_bytes,omitempty" yaml:"max_wheel_bytes,omitempty"` // 0 = no cap
	MaxLayerBytes int64    `json:"max_layer_bytes,omitempty" yaml:"max_layer_bytes,omitempty"` // 0 = no cap
	// Native says what a wheel whose compiled code needs shared libraries that are
	// neither in the wheel nor on the target platform's allow-list (layers/native)
	// gets: NativeWarn (or "") builds it with a warning, NativeRefuse rejects the request.
	Native string `json:"native,omitempty" yaml:"native,omitempty"`
}

// The values of Catalog.Native.
const (
	NativeWarn   = "warn"
	NativeRefuse = "refuse"
)

// RefusesNative reports whether requests for wheels that need libraries a session
// lacks are rejected, so that the caller must check the wheels (Package.Native) first.
func (c *Catalog) RefusesNative() bool { return c != nil && c.Native == NativeRefuse }

// Default is the catalog used when none is configured: an empty allowlist
// (every request waits for a human), nothing denied, no caps.
func Default() *Catalog { return &Catalog{} }

// Validate checks c and normalizes the names of Allow and Deny in place.
// Errors wrap ErrInvalid and name the field, e.g. `allow[2].spec: ...`.
func (c *Catalog) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, a...))
	}
	denied := map[string]int{}
	for i, n := range c.Deny {
		if !pep508.ValidName(n) {
			return bad(fmt.Sprintf("deny[%d]", i), "%q is not a valid project name", n)
		}
		c.Deny[i] = pep508.NormalizeName(n)
		if _, dup := denied[c.Deny[i]]; !dup {
			denied[c.Deny[i]] = i
		}
	}
	for i, r := range c.Allow {
		field := fmt.Sprintf("allow[%d]", i)
		if !pep508.ValidName(r.Name) {
			return bad(field+".name", "%q is not a valid project name", r.Name)
		}
		c.Allow[i].Name = pep508.NormalizeName(r.Name)
		if j, ok := denied[c.Allow[i].Name]; ok {
			return bad(field+".name", "%s is also denylisted (deny[%d]); remove it from one of the lists", r.Name, j)
		}
		if _, err := pep440.ParseSpecifierSet(r.Spec); err != nil {
			return bad(field+".spec", "%v", err)
		}
	}
	for i, s := range c.Base {
		field := fmt.Sprintf("base[%d]", i)
		req, err := pep508.ParseRequirement(s)
		if err != nil {
			return bad(field, "%v", err)
		}
		if req.URL != "" {
			return bad(field, "%q is a direct URL reference; the base list takes index requirements only", s)
		}
		if j, ok := denied[req.Key()]; ok {
			return bad(field, "%s is on the base list and denylisted (deny[%d]); remove it from one of the lists", req.Name, j)
		}
	}
	if c.MaxWheelBytes < 0 {
		return bad("max_wheel_bytes", "%d is negative; use 0 for no cap", c.MaxWheelBytes)
	}
	if c.Native != "" && c.Native != NativeWarn && c.Native != NativeRefuse {
		return bad("native", "%q is not a policy; use %q (build with a warning) or %q (reject the request)", c.Native, NativeWarn, NativeRefuse)
	}
	if c.MaxLayerBytes < 0 {
		return bad("max_layer_bytes", "%d is negative; use 0 for no cap", c.MaxLayerBytes)
	}
	return nil
}

// denied reports whether the project name is on the denylist.
func (c *Catalog) denied(name string) bool {
	key := pep508.NormalizeName(name)
	for _, d := range c.Deny {
		if pep508.NormalizeName(d) == key {
			return true
		}
	}
	return false
}

// Allowed reports whether version of the project name may be added without
// a human, and why (or why not) in a sentence that names the package. The
// denylist wins over everything; then the base list (in the versions its
// requirement admits) and the allowlist rules, any of which may match.
func (c *Catalog) Allowed(name, version string) (bool, string) {
	if c == nil {
		c = Default()
	}
	if !pep508.ValidName(name) {
		return false, fmt.Sprintf("%q is not a valid project name", name)
	}
	if c.denied(name) {
		return false, fmt.Sprintf("%s is denylisted", name)
	}
	v, err := pep440.Parse(version)
	if err != nil {
		return false, fmt.Sprintf("%s %q is not a valid version: %v", name, version, err)
	}
	key := pep508.NormalizeName(name)
	var ranges []string // what the base list and the allowlist admit for name
	for _, s := range c.Base {
		req, err := pep508.ParseRequirement(s)
		if err != nil || req.URL != "" || req.Key() != key {
			continue
		}
		if contains(req.Specifier, v) {
			return true, fmt.Sprintf("%s %s is on the base list (%s)", name, version, s)
		}
		ranges = append(ranges, describe(req.Specifier))
	}
	for _, r := range c.Allow {
		if pep508.NormalizeName(r.Name) != key {
			continue
		}
		set, err := pep440.ParseSpecifierSet(r.Spec)
		if err != nil {
			ranges = append(ranges, fmt.Sprintf("%q (invalid: %v)", r.Spec, err))
			continue
		}
		if contains(set, v) {
			return true, fmt.Sprintf("%s %s is allowlisted (%s)", name, version, describe(set))
		}
		ranges = append(ranges, describe(set))
	}
	if len(ranges) == 0 {
		return false, fmt.Sprintf("%s %s is not on the allowlist", name, version)
	}
	what := "outside"
	if v.IsPrerelease() {
		what = "a pre-release outside"
	}
	return false, fmt.Sprintf("%s %s is %s the allowlisted versions %s", name, version, what, strings.Join(ranges, " or "))
}

// contains is packaging's SpecifierSet.contains(v) with prereleases=None,
// the rule pip applies: a pre-release matches only a set that names one.
func contains(set pep440.SpecifierSet, v pep440.Version) bool {
	return set.Contains(v, set.Prereleases())
}

func describe(set pep440.SpecifierSet) string {
	if set.IsEmpty() {
		return "any final release"
	}
	return set.String()
}
