package pep508

import (
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pylayer/pylayer/internal/lazyre"
	"github.com/pylayer/pylayer/layers/pep440"
)

// Requirement is a parsed PEP 508 dependency specification.
type Requirement struct {
	Name      string              // as written
	Extras    []string            // normalized (PEP 685), sorted, deduplicated
	Specifier pep440.SpecifierSet // empty for "any version"
	URL       string              // the "name @ url" form; pylayer callers refuse it
	Marker    *Marker             // nil: always applies
}

var (
	nameRE = lazyre.New(`^[A-Za-z0-9]+(?:[-_.]+[A-Za-z0-9]+)*`)
	// compatRE is the unanchored "~=" alternative of packaging's specifier
	// regex, which pyparsing uses to find where a "~=" clause ends. Its
	// leftmost-first match makes "~=1.0alpha1" end after "~=1.0a", so pip
	// rejects that requirement; we do too.
	compatRE = lazyre.New(`(?i)^~=[\t\n\v\f\r\x1c-\x1f ]*v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+` +
		`(?:[-_\.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_\.]?[0-9]*)?` +
		`(?:(?:-[0-9]+)|(?:[-_\.]?(?:post|rev|r)[-_\.]?[0-9]*))?(?:[-_\.]?dev[-_\.]?[0-9]*)?`)
)

// ParseRequirement parses a PEP 508 requirement, e.g.
// `name[extra1,extra2] (>=1.0,<2) ; python_version < "3.12"` or
// `name @ https://host/file.whl ; os_name == "posix"`. The grammar follows
// packaging 26.2's parser: whitespace is spaces and tabs only, "===x"
// ends at ';' or ')', "name()" means any version, a URL ends at a space or
// a tab; errors are *SyntaxError values that name the column.
func ParseRequirement(s string) (Requirement, error) {
	p := &parser{s: s, kind: ErrInvalidRequirement}
	if !utf8.ValidString(s) {
		return Requirement{}, p.errAt(0, "input is not valid UTF-8")
	}
	var r Requirement
	p.ws()
	r.Name = nameRE().FindString(s[p.pos:])
	if r.Name == "" {
		return r, p.errAt(p.pos, "expected a package name (letters, digits, and . - _ between them)")
	}
	p.pos += len(r.Name)
	p.ws()
	if p.peek("[") {
		extras, err := p.extras()
		if err != nil {
			return Requirement{}, err
		}
		r.Extras = extras
		p.ws()
	}
	if p.peek("@") {
		p.pos++
		p.ws()
		start := p.pos
		for p.pos < len(s) && s[p.pos] != ' ' && s[p.pos] != '\t' {
			p.pos++
		}
		r.URL = s[start:p.pos]
		if r.URL == "" {
			return Requirement{}, p.errAt(start, "expected a URL after '@'")
		}
		if msg := checkURL(r.URL); msg != "" {
			return Requirement{}, p.errAt(start, "%s", msg)
		}
	} else {
		spec, err := p.versionSpec()
		if err != nil {
			return Requirement{}, err
		}
		r.Specifier = spec
	}
	p.ws()
	if p.peek(";") {
		p.pos++
		p.kind = ErrInvalidMarker
		m, err := p.marker()
		if err != nil {
			return Requirement{}, err
		}
		p.ws()
		if p.pos < len(s) {
			return Requirement{}, p.errAt(p.pos, "expected 'and', 'or' or the end of the marker")
		}
		r.Marker = m
	}
	if p.pos < len(s) {
		hint := "expected a version specifier, ';' and a marker, or the end"
		if r.URL != "" {
			hint = "expected ';' and a marker, or the end (a space must separate a URL from ';')"
		}
		return Requirement{}, p.errAt(p.pos, "%s", hint)
	}
	return r, nil
}

func (p *parser) extras() ([]string, error) {
	p.pos++ // '['
	seen := map[string]bool{}
	var out []string
	p.ws()
	for n := 0; !p.peek("]"); n++ {
		if n > 0 {
			if !p.peek(",") {
				return nil, p.errAt(p.pos, "expected ',' or ']' in the extras list")
			}
			p.pos++
			p.ws()
		}
		e := nameRE().FindString(p.s[p.pos:])
		if e == "" {
			return nil, p.errAt(p.pos, "expected an extra name")
		}
		p.pos += len(e)
		if n := NormalizeName(e); !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
		p.ws()
	}
	p.pos++ // ']'
	sort.Strings(out)
	return out, nil
}

// versionSpec parses an optional specifier list, bare or in parentheses.
// Each clause ends where pyparsing's longest alternative ends: "===" takes
// everything up to whitespace, "~=" what its regex matches, other
// operators everything up to whitespace , ; or ).
func (p *parser) versionSpec() (pep440.SpecifierSet, error) {
	paren := p.peek("(")
	open := p.pos
	if paren {
		p.pos++
	}
	start := -1
	var clauses []string
	for {
		save := p.pos
		if len(clauses) > 0 {
			p.ws()
			if !p.peek(",") {
				p.pos = save
				break
			}
			p.pos++
		}
		p.ws()
		if start < 0 {
			start = p.pos
		}
		n := p.clauseLen()
		if n == 0 && paren && len(clauses) == 0 {
			break // "name()" is any version, as in packaging 26.2
		}
		if n == 0 {
			if len(clauses) > 0 {
				return pep440.SpecifierSet{}, p.errAt(p.pos, "expected a version specifier such as >=1.0")
			}
			p.pos = save
			return pep440.SpecifierSet{}, nil
		}
		clauses = append(clauses, p.s[p.pos:p.pos+n])
		p.pos += n
	}
	set, err := pep440.ParseSpecifierSet(strings.Join(clauses, ","))
	if err != nil {
		e := p.errAt(start, "invalid version specifier").(*SyntaxError)
		e.Err = err
		return pep440.SpecifierSet{}, e
	}
	if paren {
		p.ws()
		if !p.peek(")") {
			return pep440.SpecifierSet{}, p.errAt(p.pos, "expected ')' to close '(' at column %d", open+1)
		}
		p.pos++
	}
	return set, nil
}

// clauseLen returns the length of the specifier clause at p.pos, or 0.
func (p *parser) clauseLen() int {
	rest := p.s[p.pos:]
	switch {
	case strings.HasPrefix(rest, "~="):
		return len(compatRE().FindString(rest))
	case strings.HasPrefix(rest, "==="):
		return 3 + spanFunc(rest[3:], func(r rune) bool { return !pep440.IsSpace(r) && r != ';' && r != ')' }, true)
	}
	for _, op := range []string{"==", "!=", "<=", ">=", "<", ">"} {
		if strings.HasPrefix(rest, op) {
			return len(op) + spanFunc(rest[len(op):], func(r rune) bool {
				return !pep440.IsSpace(r) && r != ',' && r != ';' && r != ')'
			}, true)
		}
	}
	return 0
}

// spanFunc returns the byte length of the prefix of s made of optional
// Python whitespace (if leadingSpace) followed by runes satisfying f.
func spanFunc(s string, f func(rune) bool, leadingSpace bool) int {
	i := 0
	for leadingSpace && i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !pep440.IsSpace(r) {
			break
		}
		i += n
	}
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !f(r) {
			break
		}
		i += n
	}
	return i
}

// String returns the requirement in packaging's canonical form, which
// ParseRequirement accepts: `name[a,b]<2,>=1; python_version < "3.12"`.
func (r Requirement) String() string {
	var b strings.Builder
	b.WriteString(r.Name)
	if len(r.Extras) > 0 {
		b.WriteString("[" + strings.Join(r.Extras, ",") + "]")
	}
	spec := r.Specifier.String()
	b.WriteString(spec)
	if r.URL != "" {
		b.WriteString(" @ " + r.URL)
		if r.Marker != nil {
			b.WriteString(" ")
		}
	}
	if r.Marker != nil {
		b.WriteString("; " + r.Marker.String())
	}
	return b.String()
}

// Key is the normalized name, the identity of the distribution.
func (r Requirement) Key() string { return NormalizeName(r.Name) }
