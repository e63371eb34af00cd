package assemble

import (
	"fmt"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci/interp"
)

// Check decides with lock.CheckStack, from the configs the cache keeps, whether layers (in
// mount order) fit the interpreter python and each other: each layer locked for the
// interpreter's Python, ABI and platform, every ext layer with its base. A nil python
// (degraded mode) checks the bases only. A refusal wraps lock.ErrIncompatible
// (*lock.IncompatibleError) and names the references on both sides.
func Check(python *Layer, layers []*Layer) error {
	var py *target.Target
	var name string
	if python != nil {
		c := python.interp
		if c == nil {
			pc, err := interp.ParseConfig(python.config)
			if err != nil {
				return fmt.Errorf("--python %s: %w", python.Ref, err)
			}
			c = &pc
		}
		t, err := c.Target()
		if err != nil {
			return fmt.Errorf("--python %s: %w", python.Ref, err)
		}
		py, name = &t, python.Ref
	}
	stack := make([]lock.Named, 0, len(layers))
	for _, l := range layers {
		lk := l.lock
		if lk == nil {
			var err error
			if lk, err = lock.Parse(l.config); err != nil {
				return fmt.Errorf("--layer %s: %w", l.Ref, err)
			}
		}
		stack = append(stack, lock.Named{Name: l.Ref, Lock: lk})
	}
	return lock.CheckStack(py, name, stack)
}
