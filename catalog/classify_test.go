package catalog

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/resolve"
)

const mib = 1 << 20

var testCatalog = &Catalog{
	Base: []string{"numpy>=2", "lxml"},
	Allow: []Rule{
		{Name: "six"},
		{Name: "foo", Spec: ">=1,<3"},
		{Name: "foo", Spec: "==5.*"},
		{Name: "betas", Spec: ">=1.0b1"},
	},
	Deny:          []string{"evil"},
	MaxWheelBytes: 10 * mib,
	MaxLayerBytes: 200 * mib,
}

// pkg makes a consistent package of the given size.
func pkg(name, version string, size int64) Package {
	fn := strings.NewReplacer("-", "_", ".", "_").Replace(name)
	return Package{
		Name:     name,
		Version:  version,
		Filename: fmt.Sprintf("%s-%s-py3-none-any.whl", fn, version),
		SHA256:   strings.Repeat("ab", 32),
		Size:     size,
	}
}

func TestAllowed(t *testing.T) {
	tests := []struct {
		name, version string
		want          bool
		why           string
	}{
		{"six", "1.16.0", true, "six 1.16.0 is allowlisted (any final release)"},
		{"Six", "1.16.0", true, "Six 1.16.0 is allowlisted (any final release)"},
		{"six", "2.0rc1", false, "six 2.0rc1 is a pre-release outside the allowlisted versions any final release"},
		{"foo", "2.5", true, "foo 2.5 is allowlisted (<3,>=1)"},
		{"foo", "5.1", true, "foo 5.1 is allowlisted (==5.*)"},
		{"foo", "3.0", false, "foo 3.0 is outside the allowlisted versions <3,>=1 or ==5.*"},
		{"foo", "0.9", false, "foo 0.9 is outside the allowlisted versions <3,>=1 or ==5.*"},
		{"betas", "1.0rc1", true, "betas 1.0rc1 is allowlisted (>=1.0b1)"},
		{"numpy", "2.1.0", true, "numpy 2.1.0 is on the base list (numpy>=2)"},
		{"numpy", "1.26.4", false, "numpy 1.26.4 is outside the allowlisted versions >=2"},
		{"LXML", "5.0", true, "LXML 5.0 is on the base list (lxml)"},
		{"bar", "1.0", false, "bar 1.0 is not on the allowlist"},
		{"evil", "1.0", false, "evil is denylisted"},
		{"Evil_", "1.0", false, `"Evil_" is not a valid project name`},
		{"E.V.I.L", "1.0", false, "E.V.I.L 1.0 is not on the allowlist"},
		{"six", "one", false, `six "one" is not a valid version`},
	}
	for _, tt := range tests {
		t.Run(tt.name+"=="+tt.version, func(t *testing.T) {
			ok, why := testCatalog.Allowed(tt.name, tt.version)
			if ok != tt.want || !strings.HasPrefix(why, tt.why) {
				t.Errorf("Allowed(%q, %q) = %v, %q; want %v, %q", tt.name, tt.version, ok, why, tt.want, tt.why)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	conflict := conflictErr("pkg-b 2.0 requires numpy<2, but the base layer pins numpy==2.1.0")
	conflictMsg := conflict.Error()
	noWheel := fmt.Errorf("resolving: %w", &resolve.NoWheelError{Project: "bar", Reason: "only source distributions are published (bar-1.0.tar.gz); pylayer installs wheels only, never builds sdists"})
	notFound := fmt.Errorf("%w: nope (check the spelling, or that the index serves it)", resolve.ErrNotFound)
	mismatch := fmt.Errorf("downloading six-1.16.0-py3-none-any.whl: %w: expected aa, got bb", index.ErrHashMismatch)

	tests := []struct {
		name     string
		cat      *Catalog
		req      Request
		decision Decision
		reasons  []string
		isolated bool
	}{
		{"all allowlisted", testCatalog, Request{Packages: []Package{pkg("six", "1.16.0", mib), pkg("foo", "2.0", mib)}},
			AutoApproved, []string{"all 2 packages are allowlisted wheels under the caps"}, false},
		{"one allowlisted", testCatalog, Request{Packages: []Package{pkg("six", "1.16.0", mib)}},
			AutoApproved, []string{"six 1.16.0 is an allowlisted wheel under the caps"}, false},
		{"nothing to add", testCatalog, Request{Requested: []string{"numpy"}},
			AutoApproved, []string{"nothing to add: the base layer already provides everything requested"}, false},
		{"off the allowlist", testCatalog, Request{Packages: []Package{pkg("six", "1.16.0", mib), pkg("bar", "2.0", mib)}},
			Pending, []string{"bar 2.0 is not on the allowlist"}, false},
		{"outside range", testCatalog, Request{Packages: []Package{pkg("foo", "3.1", mib)}},
			Pending, []string{"foo 3.1 is outside the allowlisted versions <3,>=1 or ==5.*"}, false},
		{"over wheel cap", testCatalog, Request{Packages: []Package{pkg("six", "1.0", 12*mib+3*mib/10)}},
			Pending, []string{"six 1.0 (12.3 MiB) is over the 10 MiB per-wheel cap"}, false},
		{"just over wheel cap", testCatalog, Request{Packages: []Package{pkg("six", "1.0", 10*mib+1)}},
			Pending, []string{"six 1.0 (10485761 bytes) is over the 10485760 bytes per-wheel cap"}, false},
		{"at wheel cap", testCatalog, Request{Packages: []Package{pkg("six", "1.0", 10*mib)}},
			AutoApproved, []string{"six 1.0 is an allowlisted wheel under the caps"}, false},
		{"unknown size with cap", testCatalog, Request{Packages: []Package{pkg("six", "1.0", 0)}},
			Pending, []string{"six 1.0 has an unknown size, so the 10 MiB per-wheel cap cannot be checked"}, false},
		{"unknown size without cap", Default(), Request{Packages: []Package{pkg("six", "1.0", 0)}},
			Pending, []string{"six 1.0 is not on the allowlist"}, false},
		{"over layer cap", testCatalog, Request{Packages: func() []Package {
			var ps []Package
			for i := 0; i < 21; i++ {
				ps = append(ps, pkg("foo", "2.0", 10*mib))
				ps[i].Name = fmt.Sprintf("p%02d", i)
				ps[i].Filename = fmt.Sprintf("p%02d-2.0-py3-none-any.whl", i)
			}
			return ps
		}()}, Pending, func() []string {
			var rs []string
			for i := 0; i < 21; i++ {
				rs = append(rs, fmt.Sprintf("p%02d 2.0 is not on the allowlist", i))
			}
			return append(rs, "the layer (210 MiB) is over the 200 MiB cap")
		}(), false},
		{"uploaded", testCatalog, Request{Uploaded: true, Packages: []Package{pkg("six", "1.16.0", mib)}},
			Pending, []string{"uploaded wheel: a human must approve it"}, false},
		{"every pending reason sorted", testCatalog, Request{Uploaded: true, Packages: []Package{
			pkg("zeta", "1.0", 11*mib), pkg("alpha", "1.0", 1), pkg("foo", "9", 1)}},
			Pending, []string{
				"alpha 1.0 is not on the allowlist",
				"foo 9 is outside the allowlisted versions <3,>=1 or ==5.*",
				"zeta 1.0 is not on the allowlist",
				"zeta 1.0 (11 MiB) is over the 10 MiB per-wheel cap",
				"uploaded wheel: a human must approve it",
			}, false},
		{"base conflict isolated", testCatalog, Request{ResolveErr: conflict, BaseConflict: true,
			Packages: []Package{pkg("numpy", "2.0.1", mib), pkg("lxml", "5.0", mib)}},
			Pending, []string{conflictMsg + ": approve as an isolated layer to replace the base for this session"}, true},
		{"base conflict off allowlist", testCatalog, Request{ResolveErr: &resolve.ConflictError{Project: "numpy"}, BaseConflict: true,
			Packages: []Package{pkg("numpy", "1.26.4", mib), pkg("bar", "1", 1)}},
			Pending, []string{
				"bar 1 is not on the allowlist",
				(&resolve.ConflictError{Project: "numpy"}).Error() + ": approve as an isolated layer to replace the base for this session",
				"numpy 1.26.4 is outside the allowlisted versions >=2",
			}, true},
		{"base conflict denylisted", testCatalog, Request{ResolveErr: conflict, BaseConflict: true,
			Packages: []Package{pkg("numpy", "1.26.4", mib), pkg("evil", "1.0", 1)}},
			Rejected, []string{"evil is denylisted"}, false},
		{"base conflict without closure", testCatalog, Request{ResolveErr: conflict, BaseConflict: true},
			Rejected, []string{"invalid request: a base conflict without the isolated closure's packages"}, false},
		{"conflict not isolable", testCatalog, Request{ResolveErr: conflict},
			Rejected, []string{conflictMsg}, false},
		{"base conflict flag on a non-conflict", testCatalog, Request{ResolveErr: noWheel, BaseConflict: true, Packages: []Package{pkg("six", "1.0", 1)}},
			Rejected, []string{noWheel.Error()}, false},
		{"no wheel", testCatalog, Request{ResolveErr: noWheel},
			Rejected, []string{noWheel.Error()}, false},
		{"not found", testCatalog, Request{ResolveErr: notFound},
			Rejected, []string{notFound.Error()}, false},
		{"hash mismatch", testCatalog, Request{ResolveErr: mismatch},
			Rejected, []string{mismatch.Error()}, false},
		{"denylisted package", testCatalog, Request{Packages: []Package{pkg("six", "1.0", 1), pkg("Evil", "1.0", 1)}},
			Rejected, []string{"Evil is denylisted"}, false},
		{"denylisted requested, not found", testCatalog, Request{Requested: []string{"EVIL>=1"}, ResolveErr: notFound},
			Rejected, []string{"EVIL is denylisted", notFound.Error()}, false},
		{"denylisted project of the error", testCatalog, Request{ResolveErr: &resolve.NoWheelError{Project: "evil", Reason: "x"}},
			Rejected, []string{"evil is denylisted", "evil: x"}, false},
		{"denylisted and uploaded", testCatalog, Request{Uploaded: true, Packages: []Package{pkg("evil", "1.0", 1)}},
			Rejected, []string{"evil is denylisted"}, false},
		{"sdist in packages", testCatalog, Request{Packages: []Package{{Name: "six", Version: "1.0", Filename: "six-1.0.tar.gz", SHA256: strings.Repeat("a", 64), Size: 1}}},
			Rejected, []string{`invalid request: package 1: six 1.0: "six-1.0.tar.gz" is not a wheel; pylayer installs wheels only`}, false},
		{"filename for another project", testCatalog, Request{Packages: []Package{func() Package { p := pkg("six", "1.0", 1); p.Filename = "evil-1.0-py3-none-any.whl"; return p }()}},
			Rejected, []string{"invalid request: package 1: six 1.0: wheel evil-1.0-py3-none-any.whl is for project evil"}, false},
		{"filename for another version", testCatalog, Request{Packages: []Package{func() Package { p := pkg("six", "1.0", 1); p.Filename = "six-2.0-py3-none-any.whl"; return p }()}},
			Rejected, []string{"invalid request: package 1: six 1.0: wheel six-2.0-py3-none-any.whl is for version 2.0"}, false},
		{"equal version spelled differently", testCatalog, Request{Packages: []Package{func() Package { p := pkg("six", "1.0", 1); p.Filename = "six-1.0.0-py3-none-any.whl"; return p }()}},
			AutoApproved, []string{"six 1.0 is an allowlisted wheel under the caps"}, false},
		{"bad sha256", testCatalog, Request{Packages: []Package{func() Package { p := pkg("six", "1.0", 1); p.SHA256 = "abc"; return p }()}},
			Rejected, []string{`invalid request: package 1: six 1.0: sha256 "abc" is not 64 hex digits`}, false},
		{"negative size", testCatalog, Request{Packages: []Package{pkg("six", "1.0", -1)}},
			Rejected, []string{"invalid request: package 1: six 1.0: negative size -1"}, false},
		{"bad version", testCatalog, Request{Packages: []Package{pkg("six", "x", 1)}},
			Rejected, nil, false},
		{"duplicate project", testCatalog, Request{Packages: []Package{pkg("six", "1.0", 1), pkg("Six", "1.1", 1)}},
			Rejected, []string{"invalid request: Six appears more than once; a layer has one version of each project"}, false},
		{"bad requested", testCatalog, Request{Requested: []string{"six>>1"}, Packages: []Package{pkg("six", "1.0", 1)}},
			Rejected, nil, false},
		{"nil catalog is default", nil, Request{Packages: []Package{pkg("six", "1.0", 1)}},
			Pending, []string{"six 1.0 is not on the allowlist"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cat.Classify(tt.req)
			if got.Decision != tt.decision || got.Isolated != tt.isolated {
				t.Fatalf("Classify = %s (isolated %v) %q; want %s (isolated %v)", got.Decision, got.Isolated, got.Reasons, tt.decision, tt.isolated)
			}
			if len(got.Reasons) == 0 {
				t.Fatal("no reasons")
			}
			if tt.reasons != nil && !reflect.DeepEqual(got.Reasons, tt.reasons) {
				t.Errorf("reasons:\n got %q\nwant %q", got.Reasons, tt.reasons)
			}
			// Deterministic whatever the order of the packages.
			rev := tt.req
			rev.Packages = append([]Package(nil), tt.req.Packages...)
			for i, j := 0, len(rev.Packages)-1; i < j; i, j = i+1, j-1 {
				rev.Packages[i], rev.Packages[j] = rev.Packages[j], rev.Packages[i]
			}
			if again := tt.cat.Classify(rev); !reflect.DeepEqual(again, got) && !strings.Contains(tt.name, "duplicate") {
				t.Errorf("reversed packages give %+v, want %+v", again, got)
			}
		})
	}
}

// conflictErr is a conflict as the resolver words it (ConflictError's
// causes are unexported, so tests cannot build one with a base pin).
type conflictErr string

func (e conflictErr) Error() string { return string(e) }
func (e conflictErr) Unwrap() error { return resolve.ErrConflict }

func TestClassifyErrorsStayMatchable(t *testing.T) {
	// The caller decides BaseConflict; Classify only trusts it for conflicts.
	err := fmt.Errorf("resolving: %w", resolve.ErrConflict)
	if !errors.Is(err, resolve.ErrConflict) {
		t.Fatal("test setup")
	}
	got := testCatalog.Classify(Request{ResolveErr: err, BaseConflict: true, Packages: []Package{pkg("six", "1.0", 1)}})
	if got.Decision != Pending || !got.Isolated {
		t.Fatalf("got %+v, want pending isolated", got)
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"}, {1023, "1023 bytes"}, {1024, "1 KiB"}, {1536, "1.5 KiB"},
		{10 * mib, "10 MiB"}, {12*mib + 3*mib/10, "12.3 MiB"}, {1 << 30, "1 GiB"}, {1<<63 - 1, "8 EiB"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.n); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestLayerTotalSaturates(t *testing.T) {
	c := &Catalog{Allow: []Rule{{Name: "a"}, {Name: "b"}}, MaxLayerBytes: 1 << 40}
	got := c.Classify(Request{Packages: []Package{pkg("a", "1", 1<<63-1), pkg("b", "1", 1<<63-1)}})
	if got.Decision != Pending || len(got.Reasons) != 1 || got.Reasons[0] != "the layer (8 EiB) is over the 1 TiB cap" {
		t.Fatalf("got %+v", got)
	}
}
