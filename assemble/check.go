package assemble

import (
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
)

// Check decides with lock.CheckFits, from what the cache derived of each artifact's config
// (local.Use), whether layers (in mount order) fit the interpreter python and each other:
// each layer locked for the interpreter's Python, ABI and platform, every ext layer with
// its base. A nil python (degraded mode) checks the bases only. A refusal wraps
// lock.ErrIncompatible (*lock.IncompatibleError) and names the references on both sides.
func Check(python *Layer, layers []*Layer) error {
	var py *target.Target
	var name string
	if python != nil {
		if python.target == nil {
			return fmt.Errorf("--python %s: %w", python.Ref, errNotChecked)
		}
		py, name = python.target, python.Ref
	}
	stack := make([]lock.NamedFit, 0, len(layers))
	for _, l := range layers {
		if l.fit == nil {
			return fmt.Errorf("--layer %s: %w", l.Ref, errNotChecked)
		}
		stack = append(stack, lock.NamedFit{Name: l.Ref, Fit: *l.fit})
	}
	return lock.CheckFits(py, name, stack)
}

// errNotChecked: a Layer that Ensure did not make (or an interpreter given as a layer,
// or the reverse), so there is nothing checked to decide from.
var errNotChecked = errors.New("not an artifact of its kind checked in the host cache")
