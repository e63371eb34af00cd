package resolve

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels wrapped by resolution errors; check them with errors.Is.
var (
	ErrNotFound     = errors.New("no such project on the index")
	ErrNoWheel      = errors.New("no wheel")
	ErrConflict     = errors.New("conflicting requirements")
	ErrTooComplex   = errors.New("resolution too complex")
	ErrBadMetadata  = errors.New("bad metadata")
	ErrUnsupportedR = errors.New("unsupported requirement")
)

// cause is one requirement on a project and who made it.
type cause struct {
	by   string // "you requested", "pkg-b 2.0 requires", "a constraint", "the base layer pins"
	spec string // what was asked, e.g. "foo>=2"
	base bool   // a pin of the base layer
}

func (c cause) String() string {
	if c.by == "" {
		return c.spec
	}
	return c.by + " " + c.spec
}

// ConflictError says that no version of a project satisfies everything asked of it.
type ConflictError struct {
	Project string
	Causes  []cause
	Detail  string // what was found, e.g. "versions on the index: 1.0, 2.0"
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

func (e *ConflictError) Error() string {
	var pins, others []string
	for _, c := range e.Causes {
		if c.base {
			pins = append(pins, c.spec)
		} else {
			others = append(others, c.String())
		}
	}
	var msg string
	switch {
	case len(pins) > 0 && len(others) > 0:
		msg = fmt.Sprintf("%s, but the base layer pins %s", strings.Join(others, " and "), strings.Join(pins, ", "))
	case len(others) > 0:
		msg = fmt.Sprintf("no version of %s satisfies %s", e.Project, strings.Join(others, " and "))
	default:
		msg = fmt.Sprintf("the base layer pins %s", strings.Join(pins, ", "))
	}
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

// NoWheelError says that a project has files, but no wheel this target can install.
type NoWheelError struct {
	Project string
	Reason  string
}

func (e *NoWheelError) Unwrap() error { return ErrNoWheel }
func (e *NoWheelError) Error() string {
	return fmt.Sprintf("%s: %s", e.Project, e.Reason)
}

// BasePins lists the base layer's pins among the causes ("foo==1.0"): non-empty when the
// conflict is with the base, which an isolated layer (replacing the base) could avoid.
func (e *ConflictError) BasePins() []string {
	var pins []string
	for _, c := range e.Causes {
		if c.base {
			pins = append(pins, c.spec)
		}
	}
	return pins
}
