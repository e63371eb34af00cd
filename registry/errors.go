package registry

import (
	"fmt"
	"strings"
)

// Error is an answer of a registry that pylayer did not expect: its HTTP status and
// the error codes of its body (the distribution spec's {"errors": [...]}), as
// go-containerregistry's transport.Error is. Match it with errors.As. Answers that mean
// something to pylayer are not Errors: 401 and 403 are ErrUnauthorized, 404 ErrNotFound.
type Error struct {
	Repository string // Repo.Name(): never carries credentials
	What       string // what was asked for: "tag base-1", "blob sha256:...", "uploading blob ..."
	StatusCode int
	Status     string      // the status line, "500 Internal Server Error"
	Errors     []ErrorCode // what the body says, at most maxErrorCodes
}

// ErrorCode is one entry of a registry's error body, e.g. {"code": "MANIFEST_INVALID",
// "message": "manifest invalid"}; Detail is not kept.
type ErrorCode struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// maxErrorCodes bounds the codes an Error keeps of a hostile body.
const maxErrorCodes = 8

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: registry answered %s", e.Repository, e.What, e.Status)
	for _, c := range e.Errors {
		fmt.Fprintf(&b, "; %.64s: %.200s", c.Code, c.Message)
	}
	return b.String()
}

// Temporary reports whether asking again may succeed: 5xx, 429 and 408.
func (e *Error) Temporary() bool { return transientStatus(e.StatusCode) }

// Has reports whether the registry answered with the error code code.
func (e *Error) Has(code string) bool {
	for _, c := range e.Errors {
		if c.Code == code {
			return true
		}
	}
	return false
}
