package broker

import (
	"path"
	"strings"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// absPath matches an absolute path where one starts: at the beginning, or after a space,
// quote, bracket, '=', ',' or ':'. A path ends at a space, quote, bracket, ',', ';' or ':'
// (errors put ": " after a path). "://" is a URL's, not a path (see RedactPaths).
var absPath = lazyre.New(`(^|[\s"'(\[=,:])(/[^\s"'()\[\]<>,;:]*)`)

// RedactPaths replaces every absolute path in msg with its last element: a wheel's file
// name, a digest, a directory's name; "/" alone becomes "…". URLs are kept. Text that an
// agent or approver will read (a request's reasons and error, audit details) goes through
// it, so the broker's data dir, cache and temporary paths never reach them.
func RedactPaths(msg string) string {
	if !strings.Contains(msg, "/") {
		return msg
	}
	var b strings.Builder
	last := 0
	for _, m := range absPath().FindAllStringSubmatchIndex(msg, -1) {
		p := msg[m[4]:m[5]]
		if strings.HasPrefix(p, "//") && m[3] > m[2] && msg[m[2]:m[3]] == ":" {
			continue // scheme://host/...
		}
		b.WriteString(msg[last:m[4]])
		base := path.Base(p)
		if base == "/" || base == "." {
			base = "…"
		}
		b.WriteString(base)
		last = m[5]
	}
	b.WriteString(msg[last:])
	return b.String()
}

// RedactError is err with RedactPaths applied to its message; errors.Is and errors.As
// still see err.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	return redacted{err}
}

type redacted struct{ err error }

func (r redacted) Error() string { return RedactPaths(r.err.Error()) }
func (r redacted) Unwrap() error { return r.err }

// publicRequest is r as a response shows it: reasons and error, which come from the
// classifier and the builder, without host paths.
func publicRequest(r Request) Request {
	if len(r.Reasons) > 0 {
		rs := make([]string, len(r.Reasons))
		for i, s := range r.Reasons {
			rs[i] = RedactPaths(s)
		}
		r.Reasons = rs
	}
	r.Error = RedactPaths(r.Error)
	return r
}
