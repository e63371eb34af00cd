package pep508

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/pylayer/pylayer/internal/lazyre"
	"github.com/pylayer/pylayer/layers/pep440"
)

var (
	// ErrUnsupportedLine is wrapped for requirements-file lines pylayer
	// refuses: options other than -r, editables, paths, URLs, hashes.
	ErrUnsupportedLine = errors.New("unsupported requirements file line")
	// ErrConstraintInFile is wrapped for "-c"/"--constraint" lines.
	ErrConstraintInFile = errors.New("constraints files cannot be included from a requirements file; use --constraint/-c on the command line")
	// ErrIncludeCycle is wrapped when "-r" files include each other.
	ErrIncludeCycle = errors.New("requirements files include each other")
)

const (
	maxReqFileSize = 4 << 20
	maxIncludes    = 32
)

// ReqFileLine is one requirement with where it was written.
type ReqFileLine struct {
	File string // path of the file, as given or joined from "-r" lines
	Line int    // 1-based; the first physical line of a continued line
	Req  Requirement
	// Hashes are the sha256 digests (lower-case hex) of its "--hash=sha256:..." options,
	// as pip's hash-checking mode reads them: the file installed must have one of them.
	Hashes []string
}

// ReqFile is a requirements file with its index options.
type ReqFile struct {
	Lines []ReqFileLine
	// IndexURL is the last "--index-url URL" / "-i URL" line, "" when none.
	IndexURL string
	// ExtraIndexURLs are the "--extra-index-url URL" lines, in order.
	ExtraIndexURLs []string
	// Where says where IndexURL was given (file:line), for messages.
	Where string
}

// ReadRequirementsFile is ParseRequirementsFile that also returns the file's index
// options (--index-url, -i, --extra-index-url), which ParseRequirementsFile ignores: the
// caller decides what they mean.
func ReadRequirementsFile(ctx context.Context, path string) (*ReqFile, error) {
	rf := &ReqFile{}
	if err := parseReqFile(ctx, path, nil, rf); err != nil {
		return nil, err
	}
	return rf, nil
}

// ParseRequirementsFile reads a pip requirements file restricted to what
// a wheel-only, pinned tool can honour. Accepted: requirements (PEP 508,
// no URL), each with "--hash=sha256:HEX" options as pip's hash-checking mode
// writes them (`pip-compile --generate-hashes`, `pylayer export`), blank lines,
// comments ("#" at the start or after whitespace), backslash continuations,
// "-r FILE" / "--requirement FILE" includes resolved relative to the including
// file (cycles are an error), and the index lines "--index-url URL", "-i URL"
// and "--extra-index-url URL" (see ReadRequirementsFile). Refused with an error
// naming file:line: "-c" (constraints belong on the command line), every other
// option (-e, --find-links, --pre, build options ...), hashes other than
// sha256, path and URL requirements, and ${VAR} references (pip would expand
// them from the environment, which would make the result depend on the caller).
// Files must be UTF-8 (a BOM is allowed) and at most 4 MiB.
func ParseRequirementsFile(ctx context.Context, path string) ([]ReqFileLine, error) {
	rf, err := ReadRequirementsFile(ctx, path)
	if err != nil {
		return nil, err
	}
	return rf.Lines, nil
}

func parseReqFile(ctx context.Context, path string, stack []string, out *ReqFile) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("reading requirements file %s: %w", path, err)
	}
	for _, s := range stack {
		if s == abs {
			return fmt.Errorf("reading requirements file %s: %w (%s)", path, ErrIncludeCycle, strings.Join(append(stack, abs), " -> "))
		}
	}
	if len(stack) >= maxIncludes {
		return fmt.Errorf("reading requirements file %s: %w: more than %d nested -r includes", path, ErrUnsupportedLine, maxIncludes)
	}
	stack = append(stack, abs)
	content, err := readReqFile(path)
	if err != nil {
		return err
	}
	for _, l := range logicalLines(content) {
		at := func(err error) error { return fmt.Errorf("%s:%d: %w", path, l.n, err) }
		if strings.HasPrefix(l.s, "-") {
			if opt, u, ok, err := indexOption(l.s); ok || err != nil {
				if err != nil {
					return at(err)
				}
				if opt == "--extra-index-url" {
					out.ExtraIndexURLs = append(out.ExtraIndexURLs, u)
				} else {
					out.IndexURL, out.Where = u, fmt.Sprintf("%s:%d", path, l.n)
				}
				continue
			}
			inc, err := includeTarget(l.s)
			if err != nil {
				return at(err)
			}
			if !filepath.IsAbs(inc) {
				inc = filepath.Join(filepath.Dir(path), inc)
			}
			if err := parseReqFile(ctx, inc, stack, out); err != nil {
				return at(err)
			}
			continue
		}
		req, hashes, err := requirementLine(l.s)
		if err != nil {
			return at(err)
		}
		out.Lines = append(out.Lines, ReqFileLine{File: path, Line: l.n, Req: req, Hashes: hashes})
	}
	return nil
}

func readReqFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading requirements file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReqFileSize+1))
	if err != nil {
		return "", fmt.Errorf("reading requirements file %s: %w", path, err)
	}
	if len(b) > maxReqFileSize {
		return "", fmt.Errorf("reading requirements file %s: larger than %d bytes", path, maxReqFileSize)
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(b) {
		return "", fmt.Errorf("reading requirements file %s: not valid UTF-8", path)
	}
	return string(b), nil
}

type logicalLine struct {
	n int
	s string
}

var (
	commentRE     = lazyre.New(`(^|[\t\n\v\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+)#.*$`)
	commentLineRE = lazyre.New(`^[\t\n\v\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]*#`)
	envVarRE      = lazyre.New(`\$\{[A-Z0-9_]+\}`)
)

// logicalLines applies pip's splitlines, join_lines and ignore_comments.
func logicalLines(content string) []logicalLine {
	var out []logicalLine
	emit := func(n int, s string) {
		s = pep440.TrimSpace(commentRE().ReplaceAllString(s, ""))
		if s != "" {
			out = append(out, logicalLine{n, s})
		}
	}
	var joined []string
	first := 0
	for i, line := range splitLines(content) {
		isComment := commentLineRE().MatchString(line)
		if !strings.HasSuffix(line, `\`) || isComment {
			if isComment {
				line = " " + line
			}
			if joined != nil {
				emit(first, strings.Join(append(joined, line), ""))
				joined = nil
			} else {
				emit(i+1, line)
			}
			continue
		}
		if joined == nil {
			first = i + 1
			joined = []string{}
		}
		joined = append(joined, strings.Trim(line, `\`))
	}
	if joined != nil {
		emit(first, strings.Join(joined, ""))
	}
	return out
}

// splitLines is Python's str.splitlines().
func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			if r == '\r' && strings.HasPrefix(s[i+1:], "\n") {
				n++
			}
			start = i + n
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// includeTarget returns the file named by a "-r" line or an error for any
// other option line.
func includeTarget(line string) (string, error) {
	f := strings.Fields(line)
	opt, val := f[0], ""
	if i := strings.IndexByte(opt, '='); i >= 0 && strings.HasPrefix(opt, "--") {
		opt, val = opt[:i], opt[i+1:]
	} else if len(opt) > 2 && opt[1] != '-' {
		opt, val = opt[:2], opt[2:]
	}
	switch opt {
	case "-r", "--requirement":
	case "-c", "--constraint":
		return "", ErrConstraintInFile
	default:
		return "", fmt.Errorf("%w: option %s is not supported (only -r FILE is; indexes, hashes and build options are set by pylayer)", ErrUnsupportedLine, opt)
	}
	if val == "" && len(f) == 2 {
		val = f[1]
	} else if val == "" || len(f) != 1 {
		return "", fmt.Errorf("%w: %s takes exactly one file name", ErrUnsupportedLine, opt)
	}
	if strings.ContainsAny(val, `"'`) || strings.Contains(val, "://") || envVarRE().MatchString(val) {
		return "", fmt.Errorf("%w: -r needs a plain local path, got %q", ErrUnsupportedLine, val)
	}
	return val, nil
}

var sha256RE = lazyre.New(`^[0-9a-fA-F]{64}$`)

func requirementLine(line string) (Requirement, []string, error) {
	if m := envVarRE().FindString(line); m != "" {
		return Requirement{}, nil, fmt.Errorf("%w: %s: environment variables are not expanded, write the value", ErrUnsupportedLine, m)
	}
	// pip's break_args_options: options start at the first " -" token.
	toks := strings.Split(line, " ")
	var hashes []string
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		if !strings.HasPrefix(tok, "-") {
			if hashes != nil && tok != "" {
				return Requirement{}, nil, fmt.Errorf("%w: %q after the options: requirement text must come first", ErrUnsupportedLine, tok)
			}
			continue
		}
		if hashes == nil {
			line = strings.Join(toks[:i], " ")
			hashes = []string{}
		}
		val, ok := strings.CutPrefix(tok, "--hash=")
		if !ok && tok == "--hash" && i+1 < len(toks) {
			i++
			val, ok = toks[i], true
		}
		if !ok {
			return Requirement{}, nil, fmt.Errorf("%w: per-requirement option %s is not supported (only --hash is)", ErrUnsupportedLine, tok)
		}
		alg, hex, _ := strings.Cut(val, ":")
		if alg != "sha256" || !sha256RE().MatchString(hex) {
			return Requirement{}, nil, fmt.Errorf("%w: --hash=%s: pylayer checks sha256 only (want --hash=sha256:<64 hex digits>)", ErrUnsupportedLine, val)
		}
		hashes = append(hashes, strings.ToLower(hex))
	}
	if hashes != nil && len(hashes) == 0 {
		return Requirement{}, nil, fmt.Errorf("%w: an option without a value", ErrUnsupportedLine)
	}
	req, err := ParseRequirement(strings.TrimSpace(line))
	if err != nil {
		if looksLikePath(line) {
			return Requirement{}, nil, fmt.Errorf("%w: %q looks like a path or URL; only name-and-version requirements are supported", ErrUnsupportedLine, line)
		}
		return Requirement{}, nil, err
	}
	if req.URL != "" {
		return Requirement{}, nil, fmt.Errorf("%w: %s: direct URL requirements are not supported, request the package by name and version", ErrUnsupportedLine, req.Name)
	}
	return req, hashes, nil
}

// indexOption reads an index line: "--index-url URL", "--index-url=URL", "-i URL",
// "-iURL" or "--extra-index-url URL". ok is false for any other line.
func indexOption(line string) (opt, u string, ok bool, err error) {
	f := strings.Fields(line)
	opt, val := f[0], ""
	if i := strings.IndexByte(opt, '='); i >= 0 && strings.HasPrefix(opt, "--") {
		opt, val = opt[:i], opt[i+1:]
	} else if strings.HasPrefix(opt, "-i") && len(opt) > 2 {
		opt, val = "-i", opt[2:]
	}
	switch opt {
	case "--index-url", "-i", "--extra-index-url":
	default:
		return "", "", false, nil
	}
	if opt == "-i" {
		opt = "--index-url"
	}
	if val == "" && len(f) == 2 {
		val = f[1]
	} else if val == "" || len(f) != 1 {
		return opt, "", true, fmt.Errorf("%w: %s takes exactly one URL", ErrUnsupportedLine, opt)
	}
	if envVarRE().MatchString(val) {
		return opt, "", true, fmt.Errorf("%w: %s: environment variables are not expanded, write the URL", ErrUnsupportedLine, opt)
	}
	return opt, val, true, nil
}

func looksLikePath(s string) bool {
	if strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, ".") {
		return true
	}
	for _, ext := range []string{".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar"} {
		if strings.HasSuffix(strings.ToLower(s), ext) {
			return true
		}
	}
	return false
}
