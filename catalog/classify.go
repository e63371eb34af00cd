package catalog

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/pylayer/pylayer/layers/native"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/resolve"
	"github.com/pylayer/pylayer/layers/wheel"
)

// Decision is the outcome of classifying a request.
type Decision string

const (
	AutoApproved Decision = "auto-approved" // build and bind without a human
	Pending      Decision = "pending"       // an approver decides
	Rejected     Decision = "rejected"      // refused; the reasons say why
)

// Package is one wheel of a resolved request.
type Package struct {
	Name     string // project name (normalized or not)
	Version  string // PEP 440
	Filename string // the wheel's file name; must match Name and Version
	SHA256   string // hex digest of the wheel file
	Size     int64  // bytes of the wheel file; 0 = unknown
	// Native is what layers/native found in the wheel's tree for the target platform;
	// nil when it was not checked. The caller checks when RefusesNative says so.
	Native *native.Report
}

// Request is a package request after resolution, as the broker saw it.
type Request struct {
	// Packages is the resolved delta (what the ext layer would add), or
	// the iso closure when BaseConflict is set; empty when resolution failed.
	Packages []Package
	// Requested are the requirement strings the agent asked for. Optional;
	// when given, a denylisted name among them rejects the request even if
	// resolution failed before reaching it.
	Requested []string
	// Uploaded marks a request for a user-uploaded .whl.
	Uploaded bool
	// ResolveErr is why resolution failed: a resolve.ErrConflict,
	// ErrNoWheel or ErrNotFound, an index.ErrHashMismatch, or another error.
	ResolveErr error
	// BaseConflict says that resolution against the base failed only
	// because of a base pin, and that a full closure without the base (an
	// iso layer) resolves; Packages then holds that closure.
	BaseConflict bool
}

// Classification is the decision on a request, with one sentence per
// finding, each naming the package it is about.
type Classification struct {
	Decision Decision
	Reasons  []string
	Isolated bool // approval builds an isolated layer that replaces the base
}

// finding is one reason, keyed for a deterministic order: by normalized
// package name, then by the order the checks ran; request-wide findings
// (key "") come after every per-package one.
type finding struct {
	key  string
	seq  int
	text string
}

type findings []finding

func (fs *findings) add(name, format string, a ...any) {
	key := ""
	if name != "" {
		key = pep508.NormalizeName(name)
	}
	*fs = append(*fs, finding{key: key, seq: len(*fs), text: fmt.Sprintf(format, a...)})
}

func (fs findings) sorted() []string {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if (a.key == "") != (b.key == "") {
			return b.key == ""
		}
		if a.key != b.key {
			return a.key < b.key
		}
		return a.seq < b.seq
	})
	out := make([]string, 0, len(fs))
	seen := map[string]bool{}
	for _, f := range fs {
		if !seen[f.text] {
			seen[f.text] = true
			out = append(out, f.text)
		}
	}
	return out
}

// Classify decides a request: rejected if anything denylisted is involved,
// resolution failed (other than a base conflict that an isolated layer
// resolves) or the request is malformed; else pending if it overrides the
// base, or anything is off the allowlist, over a cap, or uploaded; else
// auto-approved. A nil catalog is Default().
func (c *Catalog) Classify(r Request) Classification {
	if c == nil {
		c = Default()
	}
	if rej := c.rejections(r); len(rej) > 0 {
		return Classification{Decision: Rejected, Reasons: rej.sorted()}
	}
	var pend findings
	if r.BaseConflict {
		msg := "the request overrides a version the base layer pins"
		if r.ResolveErr != nil {
			msg = r.ResolveErr.Error()
		}
		pend.add(errProject(r.ResolveErr), "%s: approve as an isolated layer to replace the base for this session", msg)
	}
	var total int64
	for _, p := range r.Packages {
		if ok, why := c.Allowed(p.Name, p.Version); !ok {
			pend.add(p.Name, "%s", why)
		}
		switch {
		case c.MaxWheelBytes > 0 && p.Size == 0:
			pend.add(p.Name, "%s %s has an unknown size, so the %s per-wheel cap cannot be checked", p.Name, p.Version, formatBytes(c.MaxWheelBytes))
		case c.MaxWheelBytes > 0 && p.Size > c.MaxWheelBytes:
			s, limit := formatPair(p.Size, c.MaxWheelBytes)
			pend.add(p.Name, "%s %s (%s) is over the %s per-wheel cap", p.Name, p.Version, s, limit)
		}
		total = addSat(total, p.Size)
	}
	if c.MaxLayerBytes > 0 && total > c.MaxLayerBytes {
		s, limit := formatPair(total, c.MaxLayerBytes)
		pend.add("", "the layer (%s) is over the %s cap", s, limit)
	}
	if r.Uploaded {
		pend.add("", "uploaded wheel: a human must approve it")
	}
	if len(pend) > 0 {
		return Classification{Decision: Pending, Reasons: pend.sorted(), Isolated: r.BaseConflict}
	}
	var why string
	switch n := len(r.Packages); n {
	case 0:
		why = "nothing to add: the base layer already provides everything requested"
	case 1:
		p := r.Packages[0]
		why = fmt.Sprintf("%s %s is an allowlisted wheel under the caps", p.Name, p.Version)
	default:
		why = fmt.Sprintf("all %d packages are allowlisted wheels under the caps", n)
	}
	return Classification{Decision: AutoApproved, Reasons: []string{why}}
}

// rejections collects every reason to refuse the request outright.
func (c *Catalog) rejections(r Request) findings {
	var rej findings
	deny := func(name string) {
		if name != "" && c.denied(name) {
			rej.add(name, "%s is denylisted", name)
		}
	}
	for _, s := range r.Requested {
		req, err := pep508.ParseRequirement(s)
		if err != nil {
			rej.add("", "invalid request: %v", err)
			continue
		}
		deny(req.Name)
	}
	deny(errProject(r.ResolveErr))
	if r.ResolveErr != nil && !(r.BaseConflict && errors.Is(r.ResolveErr, resolve.ErrConflict)) {
		rej.add(errProject(r.ResolveErr), "%s", r.ResolveErr.Error())
	}
	if r.BaseConflict && len(r.Packages) == 0 {
		rej.add(errProject(r.ResolveErr), "invalid request: a base conflict without the isolated closure's packages")
	}
	seen := map[string]bool{}
	for i, p := range r.Packages {
		if err := checkPackage(p); err != nil {
			rej.add(p.Name, "invalid request: package %d: %v", i+1, err)
			continue
		}
		key := pep508.NormalizeName(p.Name)
		if seen[key] {
			rej.add(p.Name, "invalid request: %s appears more than once; a layer has one version of each project", p.Name)
		}
		seen[key] = true
		deny(p.Name)
		if c.RefusesNative() && p.Native != nil && len(p.Native.Missing) > 0 {
			rej.add(p.Name, "%s %s", p.Filename, p.Native.Summary())
		}
	}
	return rej
}

// checkPackage rejects a package whose fields do not add up.
func checkPackage(p Package) error {
	if !pep508.ValidName(p.Name) {
		return fmt.Errorf("%q is not a valid project name", p.Name)
	}
	v, err := pep440.Parse(p.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	if !strings.HasSuffix(p.Filename, ".whl") {
		return fmt.Errorf("%s %s: %q is not a wheel; pylayer installs wheels only", p.Name, p.Version, p.Filename)
	}
	fn, err := wheel.ParseFilename(p.Filename)
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.Name, p.Version, err)
	}
	if pep508.NormalizeName(fn.Name) != pep508.NormalizeName(p.Name) {
		return fmt.Errorf("%s %s: wheel %s is for project %s", p.Name, p.Version, p.Filename, fn.Name)
	}
	if fv, err := pep440.Parse(fn.Version); err != nil || !fv.Equal(v) {
		return fmt.Errorf("%s %s: wheel %s is for version %s", p.Name, p.Version, p.Filename, fn.Version)
	}
	if !isSHA256(p.SHA256) {
		return fmt.Errorf("%s %s: sha256 %q is not 64 hex digits", p.Name, p.Version, p.SHA256)
	}
	if p.Size < 0 {
		return fmt.Errorf("%s %s: negative size %d", p.Name, p.Version, p.Size)
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
			return false
		}
	}
	return true
}

// errProject is the project a resolution error is about, if it says.
func errProject(err error) string {
	var ce *resolve.ConflictError
	if errors.As(err, &ce) {
		return ce.Project
	}
	var nw *resolve.NoWheelError
	if errors.As(err, &nw) {
		return nw.Project
	}
	return ""
}

func addSat(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

// formatBytes renders n in binary units with one decimal, trimmed:
// "512 bytes", "1.5 KiB", "10 MiB", "12.3 MiB".
func formatBytes(n int64) string { return formatIn(n, unitOf(n)) }

var units = []string{"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

func unitSize(u int) float64 { return float64(int64(1) << (10 * u)) }

// unitOf is the largest unit in which n is at least 1.
func unitOf(n int64) int {
	u := 0
	for u < len(units)-1 && float64(n) >= unitSize(u+1) {
		u++
	}
	return u
}

func formatIn(n int64, u int) string {
	if u == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/unitSize(u)), ".0") + " " + units[u]
}

// formatPair renders a size over its cap ("12.3 MiB" over "10 MiB"), in
// exact bytes when rounding would hide the difference.
func formatPair(size, limit int64) (string, string) {
	u := unitOf(size)
	if u > 0 && u == unitOf(limit) && math.Round(float64(size)/unitSize(u)*10) <= math.Round(float64(limit)/unitSize(u)*10) {
		return formatIn(size, 0), formatIn(limit, 0)
	}
	return formatBytes(size), formatBytes(limit)
}
