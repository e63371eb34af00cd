package pep508

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

var (
	// ErrInvalidRequirement is wrapped by every requirement syntax error.
	ErrInvalidRequirement = errors.New("invalid requirement")
	// ErrInvalidMarker is wrapped by every marker syntax error.
	ErrInvalidMarker = errors.New("invalid environment marker")
	// ErrUndefinedComparison: the operator has no meaning for the operands,
	// e.g. os_name ~= "posix" (packaging's UndefinedComparison).
	ErrUndefinedComparison = errors.New("undefined comparison in marker")
	// ErrUndefinedEnvironmentName: the marker needs a variable that the
	// Environment does not define (packaging's UndefinedEnvironmentName).
	ErrUndefinedEnvironmentName = errors.New("marker variable not in environment")
)

// SyntaxError says what is wrong with a requirement or marker and where.
type SyntaxError struct {
	Input  string
	Offset int    // byte offset into Input
	Msg    string // what was expected or found
	Kind   error  // ErrInvalidRequirement or ErrInvalidMarker
	Err    error  // underlying cause, e.g. from pep440; may be nil
}

// Column is the 1-based character column of the error.
func (e *SyntaxError) Column() int {
	off := min(max(e.Offset, 0), len(e.Input))
	return utf8.RuneCountInString(e.Input[:off]) + 1
}

func (e *SyntaxError) Error() string {
	msg := fmt.Sprintf("%v %q: %s at column %d", e.Kind, e.Input, e.Msg, e.Column())
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and Err, so errors.Is works for both.
func (e *SyntaxError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}
