package lock

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/layers/wheel"
)

// ErrIncompatible is wrapped by every refusal of CheckStack: a layer that does not fit the
// interpreter it would run on, or an ext layer without its base.
var ErrIncompatible = errors.New("layers do not fit")

// Named is a lock with the name a user knows its layer by (a reference, REPO@DIGEST).
type Named struct {
	Name string
	Lock *Lock
}

// Fit is what CheckStack reads of a layer's lock: its kind, target and wheels, and the
// keys that tie an ext layer to its base. Derived from a valid lock (Lock.Fit), it is a
// few hundred bytes where the lock is kilobytes: the host cache keeps it beside the digest
// whose lock it was derived from (registry/local), so that a run checks its stack without
// re-reading, re-validating and re-hashing every lock.
type Fit struct {
	Kind          Kind          `json:"kind"`
	ResolutionKey string        `json:"resolution_key,omitempty"` // a base's (Lock.ResolutionKey); "" for other kinds
	Base          string        `json:"base,omitempty"`           // an ext layer's (Lock.Base)
	Target        target.Target `json:"target"`
	Wheels        []string      `json:"wheels"` // every package's wheel filename, in lock order
}

// NamedFit is a Fit with the name a user knows its layer by, as Named.
type NamedFit struct {
	Name string
	Fit  Fit
}

// Fit derives what CheckStack reads from l, which must be valid.
func (l *Lock) Fit() (Fit, error) {
	f := Fit{Kind: l.Kind, Base: l.Base, Target: l.Target, Wheels: make([]string, len(l.Packages))}
	for i, p := range l.Packages {
		f.Wheels[i] = p.Filename
	}
	if l.Kind == KindBase {
		k, err := l.ResolutionKey()
		if err != nil {
			return Fit{}, err
		}
		f.ResolutionKey = k
	}
	return f, nil
}

// Validate checks what a Fit read back must hold: a known kind, a base's resolution key
// and an ext layer's base as 64 hex digits, a valid target, a wheel filename for every
// package (CheckFits parses each one it checks against an interpreter). Errors wrap
// ErrInvalid.
func (f Fit) Validate() error {
	if _, err := ParseKind(string(f.Kind)); err != nil {
		return invalid("%v", err)
	}
	switch {
	case (f.Kind == KindBase) != (f.ResolutionKey != ""), f.ResolutionKey != "" && !isHexSHA256(f.ResolutionKey):
		return invalid("a %s layer with resolution key %q", f.Kind, f.ResolutionKey)
	case (f.Kind == KindExt) != (f.Base != ""), f.Base != "" && !isHexSHA256(f.Base):
		return invalid("a %s layer with base %q", f.Kind, f.Base)
	}
	if err := f.Target.Validate(); err != nil {
		return invalid("target: %v", err)
	}
	for i, w := range f.Wheels {
		if !strings.HasSuffix(w, ".whl") || strings.ContainsAny(w, "/\\\x00") {
			return invalid("wheel %d: %q is not a wheel filename", i, w)
		}
	}
	return nil
}

// IncompatibleError is a refusal of CheckStack. It names both sides: the layer and what it
// needs, and the interpreter (or the stack) and what it is.
type IncompatibleError struct {
	Layer string // the layer's name
	What  string // "python", "abi", "platform", "wheel" or "base"
	Needs string // what the layer needs, e.g. "CPython 3.12 (abi cp312)"
	Other string // the other side's name: the interpreter's, or "the stack"
	Has   string // what the other side is, e.g. "CPython 3.11.2 (abi cp311)"
	Hint  string // what to do
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("%v: layer %s needs %s, but %s is %s: %s", ErrIncompatible, e.Layer, e.Needs, e.Other, e.Has, e.Hint)
}

func (e *IncompatibleError) Unwrap() error { return ErrIncompatible }

// CheckStack decides whether layers (in mount order) can run together on the interpreter
// whose target is python, named pythonName: each layer's lock must be for the
// interpreter's Python minor version and ABI, its platform must be one the interpreter
// supports, and each of its wheels must carry a tag the interpreter supports; every ext
// layer's base (Lock.Base, the base's ResolutionKey) must be a base layer of the stack.
// A nil python (degraded mode: the host's interpreter, not an artifact) checks the bases
// only. The first refusal is an *IncompatibleError (wrapping ErrIncompatible).
//
// run, ensure and the broker's builder call this one function, so a layer refused by one is
// refused by all.
func CheckStack(python *target.Target, pythonName string, layers []Named) error {
	fits := make([]NamedFit, len(layers))
	for i, n := range layers {
		f, err := n.Lock.Fit()
		if err != nil {
			return fmt.Errorf("layer %s: %w", n.Name, err)
		}
		fits[i] = NamedFit{Name: n.Name, Fit: f}
	}
	return CheckFits(python, pythonName, fits)
}

// CheckFits is CheckStack on what it reads of each lock (Lock.Fit): the check itself.
func CheckFits(python *target.Target, pythonName string, layers []NamedFit) error {
	bases := map[string]bool{}
	var have []string
	for _, n := range layers {
		if n.Fit.Kind != KindBase {
			continue
		}
		k := n.Fit.ResolutionKey
		bases[k] = true
		have = append(have, fmt.Sprintf("base %s (%s)", k, n.Name))
	}
	for _, n := range layers {
		if python != nil {
			if err := fits(python, pythonName, n); err != nil {
				return err
			}
		}
		if n.Fit.Kind == KindExt && !bases[n.Fit.Base] {
			e := &IncompatibleError{Layer: n.Name, What: "base", Needs: "base " + n.Fit.Base + " (the base it was resolved against)",
				Other: "the stack", Has: "without a base layer",
				Hint: "give that base with --layer before the ext layer, or lock the ext layer again against the base you run (pylayer lock --kind ext -c BASE.lock.json)"}
			if len(have) > 0 {
				e.Has = "on " + strings.Join(have, ", ")
			}
			return e
		}
	}
	return nil
}

// fits checks one layer against the interpreter's target.
func fits(py *target.Target, pyName string, n NamedFit) error {
	t := n.Fit.Target
	interp := fmt.Sprintf("CPython %s (abi %s, platform %s)", py.PythonFull, py.ABI, py.Platform)
	refuse := func(what, needs, hint string) error {
		return &IncompatibleError{Layer: n.Name, What: what, Needs: needs, Other: "interpreter " + pyName, Has: interp, Hint: hint}
	}
	relock := "lock the layer for this interpreter (pylayer lock --python-from " + pyName + ")"
	switch {
	case t.Python != py.Python:
		return refuse("python", fmt.Sprintf("CPython %s (abi %s)", t.Python, t.ABI), relock+", or run it on a CPython "+t.Python+" interpreter")
	case t.Implementation != py.Implementation || t.ABI != py.ABI:
		return refuse("abi", fmt.Sprintf("CPython %s with abi %s", t.Python, t.ABI), relock+", or run it on an interpreter of abi "+t.ABI)
	case !slices.Contains(py.Platforms, t.Platform):
		return refuse("platform", "platform "+t.Platform, relock+", or run it on a "+t.Platform+" interpreter")
	}
	for _, w := range n.Fit.Wheels {
		fn, err := wheel.ParseFilename(w)
		if err != nil {
			return fmt.Errorf("layer %s: %w", n.Name, err)
		}
		var tags []target.Tag
		for _, tr := range fn.TagTriples() {
			tags = append(tags, target.Tag{Interpreter: tr[0], ABI: tr[1], Platform: tr[2]})
		}
		if py.BestRank(tags) < 0 {
			return refuse("wheel", "an interpreter that supports its wheel "+w, relock)
		}
	}
	return nil
}
