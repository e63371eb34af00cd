package lock

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/target"
)

const compiled311 = "cpython-311 a70d0d0a 3.11.2 (main, Mar 13 2023, 12:18:29) [GCC 12.2.0]"

func TestCompiledByInKey(t *testing.T) {
	plain := sample(t)
	by311 := sample(t)
	by311.CompiledBy = compiled311
	other := sample(t)
	other.CompiledBy = "cpython-311 a70d0d0a 3.11.9 (main, Apr 2 2024, 08:25:04) [GCC 13.2.0]"
	again := sample(t)
	again.CompiledBy = compiled311
	keys := map[string]string{}
	for name, l := range map[string]*Lock{"plain": plain, "by 3.11.2": by311, "by 3.11.9": other} {
		k, err := l.Key()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if prev, ok := keys[k]; ok {
			t.Errorf("%s and %s have one key %s: one key would have two digests", name, prev, k)
		}
		keys[k] = name
		rk, err := l.ResolutionKey()
		if pk, _ := plain.Key(); err != nil || rk != pk {
			t.Errorf("%s: resolution key %s (%v), want the key without compiled_by %s", name, rk, err, pk)
		}
	}
	if k1, _ := by311.Key(); true {
		if k2, _ := again.Key(); k1 != k2 {
			t.Errorf("the same lock compiled by the same interpreter: keys %s and %s", k1, k2)
		}
	}
	// It round-trips, and a lock without it keeps its bytes (no "compiled_by" key).
	b, err := by311.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if l, err := Parse(b); err != nil || l.CompiledBy != compiled311 {
		t.Errorf("Parse: %v, compiled_by %q", err, l.CompiledBy)
	}
	if b, _ := plain.Canonical(); strings.Contains(string(b), "compiled_by") {
		t.Error("a lock without .pyc writes compiled_by")
	}
	for name, s := range map[string]string{
		"other minor": "cpython-312 cb0d0d0a 3.12.1 (main) [GCC]",
		"no magic":    "cpython-311 3.11.2",
		"newline":     "cpython-311 a70d0d0a 3.11.2\n[GCC]",
		"too long":    "cpython-311 a70d0d0a " + strings.Repeat("x", 300),
		"not cpython": "pypy-311 a70d0d0a 7.3",
	} {
		l := sample(t)
		l.CompiledBy = s
		if _, err := l.Key(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: compiled_by %q: %v, want ErrInvalid", name, s, err)
		}
	}
	if got := CompiledByOf("cpython-311", "a70d0d0a", "3.11.2 (main, Mar 13 2023, 12:18:29)\n[GCC 12.2.0]"); got != compiled311 {
		t.Errorf("CompiledByOf = %q", got)
	}
}

func stackLock(t *testing.T, kind Kind, python, platform, wheel, base string) *Lock {
	t.Helper()
	tg, err := target.FromFlags(python, platform)
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := strings.Cut(wheel, "-")
	l := &Lock{Version: FormatVersion, Kind: kind, Base: base, Target: tg, Requirements: []string{name},
		Packages: []Package{{Name: name, Version: "1.0", Filename: wheel, SHA256: strings.Repeat("c", 64), Size: 1, RequiredBy: []string{Requested}}}}
	if _, err := l.Key(); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCheckStack(t *testing.T) {
	py, err := target.FromFlags("3.11.2", "manylinux_2_36_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	base := stackLock(t, KindBase, "3.11", "manylinux_2_28_x86_64", "a-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "")
	compiled := *base
	compiled.CompiledBy = compiled311
	baseKey, _ := base.Key()
	ext := stackLock(t, KindExt, "3.11", "manylinux_2_28_x86_64", "b-1.0-py3-none-any.whl", baseKey)
	otherBase := stackLock(t, KindBase, "3.11", "manylinux_2_28_x86_64", "c-1.0-py3-none-any.whl", "")
	n := func(name string, l *Lock) Named { return Named{Name: name, Lock: l} }
	tests := []struct {
		name   string
		python *target.Target
		layers []Named
		what   string // "" fits
		says   []string
	}{
		{"base and ext fit", &py, []Named{n("R@base", base), n("R@ext", ext)}, "", nil},
		{"a base compiled by an interpreter still carries its ext", &py, []Named{n("R@base", &compiled), n("R@ext", ext)}, "", nil},
		{"degraded: no interpreter, bases still checked", nil, []Named{n("R@base", base), n("R@ext", ext)}, "", nil},
		{"locked for 3.12", &py, []Named{n("R@b312", stackLock(t, KindBase, "3.12", "manylinux_2_28_x86_64", "a-1.0-py3-none-any.whl", ""))},
			"python", []string{"R@b312", "CPython 3.12", "interpreter R@py", "CPython 3.11.2", "cp311"}},
		{"locked for aarch64", &py, []Named{n("R@arm", stackLock(t, KindBase, "3.11", "manylinux_2_28_aarch64", "a-1.0-py3-none-any.whl", ""))},
			"platform", []string{"R@arm", "manylinux_2_28_aarch64", "interpreter R@py", "manylinux_2_36_x86_64"}},
		{"locked for musl", &py, []Named{n("R@musl", stackLock(t, KindIso, "3.11", "musllinux_1_2_x86_64", "a-1.0-py3-none-any.whl", ""))},
			"platform", []string{"R@musl", "musllinux_1_2_x86_64"}},
		{"a wheel the interpreter cannot load", &py, []Named{n("R@w", stackLock(t, KindBase, "3.11", "manylinux_2_28_x86_64", "a-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", ""))},
			"wheel", []string{"R@w", "a-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "interpreter R@py"}},
		{"ext without a base", &py, []Named{n("R@ext", ext)}, "base", []string{"R@ext", baseKey, "without a base layer"}},
		{"ext on another base", nil, []Named{n("R@other", otherBase), n("R@ext", ext)}, "base", []string{"R@ext", baseKey, "R@other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStack(tc.python, "R@py", tc.layers)
			if tc.what == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ie *IncompatibleError
			if !errors.As(err, &ie) || !errors.Is(err, ErrIncompatible) || ie.What != tc.what {
				t.Fatalf("CheckStack = %v, want an *IncompatibleError about %s", err, tc.what)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q: %v", s, err)
				}
			}
		})
	}
}

// TestFit: a lock's fit survives JSON (as the host cache keeps it), decides as the lock
// does, and a damaged one is refused by Validate.
func TestFit(t *testing.T) {
	base := stackLock(t, KindBase, "3.11", "manylinux_2_28_x86_64", "a-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "")
	rk, err := base.ResolutionKey()
	if err != nil {
		t.Fatal(err)
	}
	ext := stackLock(t, KindExt, "3.11", "manylinux_2_28_x86_64", "b-1.0-py3-none-any.whl", rk)
	py, err := target.FromFlags("3.11.2", "manylinux_2_36_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	var fits []NamedFit
	for _, l := range []*Lock{base, ext} {
		f, err := l.Fit()
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var back Fit
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(back, f) {
			t.Fatalf("round trip: %+v, want %+v", back, f)
		}
		fits = append(fits, NamedFit{Name: "R@" + string(l.Kind), Fit: back})
	}
	if fits[0].Fit.ResolutionKey != rk || fits[1].Fit.ResolutionKey != "" || fits[1].Fit.Base != rk {
		t.Errorf("fits %+v: want the base's resolution key on the base only", fits)
	}
	if err := CheckFits(&py, "R@py", fits); err != nil {
		t.Errorf("CheckFits: %v", err)
	}
	if err := CheckFits(&py, "R@py", fits[1:]); !errors.Is(err, ErrIncompatible) {
		t.Errorf("CheckFits without the base: %v, want ErrIncompatible", err)
	}
	good := fits[0].Fit
	for name, f := range map[string]func(*Fit){
		"unknown kind":           func(f *Fit) { f.Kind = "weird" },
		"base without its key":   func(f *Fit) { f.ResolutionKey = "" },
		"short key":              func(f *Fit) { f.ResolutionKey = "abc" },
		"base naming a base":     func(f *Fit) { f.Base = rk },
		"ext without a base":     func(f *Fit) { f.Kind, f.ResolutionKey = KindExt, "" },
		"invalid target":         func(f *Fit) { f.Target.ABI = "" },
		"not a wheel":            func(f *Fit) { f.Wheels = []string{"a-1.0.tar.gz"} },
		"a path, not a filename": func(f *Fit) { f.Wheels = []string{"../a-1.0-py3-none-any.whl"} },
	} {
		bad := good
		bad.Wheels = slices.Clone(good.Wheels)
		f(&bad)
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}
