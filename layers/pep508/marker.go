package pep508

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Environment holds marker variable values: python_version,
// python_full_version, os_name, sys_platform, platform_release,
// platform_system, platform_version, platform_machine,
// platform_python_implementation, implementation_name,
// implementation_version. "extra" is not read from it; see
// Marker.Evaluate.
type Environment map[string]string

// Marker is a parsed environment marker. A nil *Marker means "always".
type Marker struct {
	items []item
}

// item is one element of packaging's flat marker list: a comparison, a
// parenthesized sub-list, or the boolean operator between two of those.
type item struct {
	cmp    *comparison
	group  []item
	boolop string // "and" or "or"
}

type operand struct {
	isVar bool
	s     string // variable name (aliases resolved) or unquoted value
}

type comparison struct {
	l  operand
	op string
	r  operand
}

// variables in packaging 21.3's match order, with PEP 345 and setuptools
// aliases mapped to their PEP 508 names.
var variables = []struct{ name, canon string }{
	{"implementation_version", ""}, {"platform_python_implementation", ""}, {"implementation_name", ""},
	{"python_full_version", ""}, {"platform_release", ""}, {"platform_version", ""}, {"platform_machine", ""},
	{"platform_system", ""}, {"python_version", ""}, {"sys_platform", ""}, {"os_name", ""},
	{"os.name", "os_name"}, {"sys.platform", "sys_platform"}, {"platform.version", "platform_version"},
	{"platform.machine", "platform_machine"}, {"platform.python_implementation", "platform_python_implementation"},
	{"python_implementation", "platform_python_implementation"}, {"extra", ""},
}

var markerOps = []string{"===", "==", ">=", "<=", "!=", "~=", ">", "<", "not in", "in"}

// maxDepth bounds parenthesis nesting so hostile input cannot exhaust the
// stack.
const maxDepth = 64

// ParseMarker parses a PEP 508 environment marker such as
// `python_version < "3.12" and (sys_platform == "linux" or extra == "x")`.
// Unknown variables are syntax errors.
func ParseMarker(s string) (*Marker, error) {
	p := &parser{s: s, kind: ErrInvalidMarker}
	if !utf8.ValidString(s) {
		return nil, p.errAt(0, "input is not valid UTF-8")
	}
	m, err := p.marker()
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.pos < len(s) {
		return nil, p.errAt(p.pos, "expected 'and', 'or' or the end of the marker")
	}
	return m, nil
}

// parser is shared by markers and requirements; whitespace is pyparsing's
// default set.
type parser struct {
	s     string
	pos   int
	depth int
	kind  error
}

// ws skips packaging 26.2's WS token, [ \t]+: a line break is never
// whitespace, so a marker or requirement with a trailing newline is refused.
func (p *parser) ws() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

// word reports whether lit is at p.pos and ends on a word boundary, as the
// \b of packaging 26.2's BOOLOP, IN, NOT and VARIABLE tokens requires.
func (p *parser) word(lit string) bool {
	if !p.peek(lit) {
		return false
	}
	end := p.pos + len(lit)
	if end == len(p.s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(p.s[end:])
	return !isWordRune(r)
}

// isWordRune is Python's \w for str patterns (approximately: letters,
// digits and the underscore).
func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.No, r)
}

func (p *parser) errAt(off int, format string, args ...any) error {
	return &SyntaxError{Input: p.s, Offset: off, Msg: fmt.Sprintf(format, args...), Kind: p.kind}
}

func (p *parser) peek(lit string) bool { return strings.HasPrefix(p.s[p.pos:], lit) }

func (p *parser) marker() (*Marker, error) {
	items, err := p.expr()
	if err != nil {
		return nil, err
	}
	return &Marker{items: items}, nil
}

// expr parses atom (("and"|"or") expr)*, flattened as pyparsing does.
// Like pyparsing, "and"/"or" need no space after them.
func (p *parser) expr() ([]item, error) {
	first, err := p.atom()
	if err != nil {
		return nil, err
	}
	items := []item{first}
	for {
		save := p.pos
		p.ws()
		var op string
		for _, o := range []string{"and", "or"} {
			if p.word(o) {
				op = o
			}
		}
		if op == "" {
			p.pos = save
			return items, nil
		}
		p.pos += len(op)
		rest, err := p.expr()
		if err != nil {
			return nil, err
		}
		items = append(append(items, item{boolop: op}), rest...)
	}
}

func (p *parser) atom() (item, error) {
	p.ws()
	if !p.peek("(") {
		c, err := p.comparison()
		return item{cmp: c}, err
	}
	if p.depth >= maxDepth {
		return item{}, p.errAt(p.pos, "parentheses nested deeper than %d", maxDepth)
	}
	open := p.pos
	p.pos++
	p.depth++
	g, err := p.expr()
	p.depth--
	if err != nil {
		return item{}, err
	}
	p.ws()
	if !p.peek(")") {
		return item{}, p.errAt(p.pos, "expected ')' to close '(' at column %d", open+1)
	}
	p.pos++
	return item{group: g}, nil
}

func (p *parser) comparison() (*comparison, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	p.ws()
	var op string
	switch {
	case p.word("in"):
		op = "in"
		p.pos += len(op)
	case p.word("not"):
		p.pos += len("not")
		n := p.pos
		if p.ws(); p.pos == n || !p.word("in") {
			return nil, p.errAt(p.pos, "expected whitespace and 'in' after 'not'")
		}
		op = "not in"
		p.pos += len("in")
	default:
		for _, o := range markerOps {
			if o != "in" && o != "not in" && p.peek(o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, p.errAt(p.pos, "expected a marker operator (== != < <= > >= ~= === in, not in)")
		}
		p.pos += len(op)
	}
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	// packaging 26.0 normalizes the value compared with extra when parsing, so
	// String() prints extra == "foo-bar" for extra == "Foo_Bar".
	if l.isVar && l.s == "extra" && !r.isVar {
		r.s = NormalizeName(r.s)
	} else if r.isVar && r.s == "extra" && !l.isVar {
		l.s = NormalizeName(l.s)
	}
	return &comparison{l: l, op: op, r: r}, nil
}

func (p *parser) operand() (operand, error) {
	p.ws()
	if p.pos >= len(p.s) {
		return operand{}, p.errAt(p.pos, "expected a marker variable or a quoted string, found the end")
	}
	if q := p.s[p.pos]; q == '"' || q == '\'' {
		start := p.pos
		end := strings.IndexAny(p.s[start+1:], string(q)+"\n\r")
		if end < 0 || p.s[start+1+end] != q {
			return operand{}, p.errAt(start, "unterminated string (strings cannot span lines)")
		}
		p.pos = start + 1 + end + 1
		return operand{s: unescape(p.s[start+1 : start+1+end])}, nil
	}
	for _, v := range variables {
		if p.word(v.name) {
			p.pos += len(v.name)
			if v.canon != "" {
				return operand{isVar: true, s: v.canon}, nil
			}
			return operand{isVar: true, s: v.name}, nil
		}
	}
	word := p.pos
	for word < len(p.s) && (isAlnum(p.s[word]) || p.s[word] == '_' || p.s[word] == '.') {
		word++
	}
	if word > p.pos {
		return operand{}, p.errAt(p.pos, "unknown marker variable %q", p.s[p.pos:word])
	}
	return operand{}, p.errAt(p.pos, "expected a marker variable or a quoted string")
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// unescape applies pyparsing QuotedString's convert_whitespace_escapes:
// the two-character sequences \t \n \f \r become the control character,
// scanning left to right; nothing else is an escape.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			if r := strings.IndexByte("tnfr", s[i+1]); r >= 0 {
				b.WriteByte("\t\n\f\r"[r])
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// quote renders a value so that it parses back to itself: double quotes
// unless the value contains one, and \n, \r written as escapes. (A value
// can never hold a backslash followed by t, n, f or r, so this is
// unambiguous.)
func quote(s string) string {
	q := `"`
	if strings.Contains(s, `"`) {
		q = `'`
	}
	s = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
	return q + s + q
}

func (o operand) String() string {
	if o.isVar {
		return o.s
	}
	return quote(o.s)
}

// String returns the marker in packaging's normalized form:
// `python_version < "3.12" and (os_name == "posix" or extra == "x")`.
func (m *Marker) String() string {
	if m == nil {
		return ""
	}
	return formatItems(m.items, true)
}

func formatItems(items []item, first bool) string {
	if len(items) == 1 {
		if items[0].cmp != nil {
			return items[0].cmp.String()
		}
		return formatItems(items[0].group, first)
	}
	parts := make([]string, len(items))
	for i, it := range items {
		switch {
		case it.cmp != nil:
			parts[i] = it.cmp.String()
		case it.boolop != "":
			parts[i] = it.boolop
		default:
			parts[i] = formatItems(it.group, false)
		}
	}
	s := strings.Join(parts, " ")
	if first {
		return s
	}
	return "(" + s + ")"
}

func (c *comparison) String() string { return c.l.String() + " " + c.op + " " + c.r.String() }
