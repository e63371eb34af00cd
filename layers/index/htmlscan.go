package index

import (
	"bytes"
	"html"
	"strings"
)

// htmlAttr is one attribute of a start tag. hasValue is false for a bare
// attribute such as <a data-yanked href=...>.
type htmlAttr struct {
	value    string
	hasValue bool
}

// htmlPage is what a simple-index HTML page holds for us: the first
// <base href> and the attributes of every <a>.
type htmlPage struct {
	baseHref string
	hasBase  bool
	anchors  []map[string]htmlAttr
}

// scanHTML is a small tolerant scanner modelled on Python's
// html.parser.HTMLParser as pip uses it: tag and attribute names are
// lower-cased, attribute values are entity-unescaped, later duplicates of an
// attribute win, comments, declarations, processing instructions and the
// contents of <script> and <style> are skipped. It never fails.
func scanHTML(b []byte) htmlPage {
	var p htmlPage
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '<')
		if j < 0 {
			break
		}
		i += j
		rest := b[i:]
		switch {
		case bytes.HasPrefix(rest, []byte("<!--")):
			k := bytes.Index(rest[4:], []byte("-->"))
			if k < 0 {
				return p
			}
			i += 4 + k + 3
		case len(rest) > 1 && (rest[1] == '!' || rest[1] == '?' || rest[1] == '/'):
			k := bytes.IndexByte(rest, '>')
			if k < 0 {
				return p
			}
			i += k + 1
		case len(rest) > 1 && isASCIILetter(rest[1]):
			name, attrs, n := scanStartTag(rest)
			i += n
			switch name {
			case "a":
				p.anchors = append(p.anchors, attrs)
			case "base":
				if a, ok := attrs["href"]; ok && a.hasValue && !p.hasBase {
					p.baseHref, p.hasBase = a.value, true
				}
			case "script", "style":
				k := indexFold(b[i:], "</"+name)
				if k < 0 {
					return p
				}
				i += k
			}
		default:
			i++
		}
	}
	return p
}

// scanStartTag parses "<name attrs...>" at the start of b and returns the
// lower-cased tag name, its attributes and the bytes consumed. An
// unterminated tag consumes the rest of the input.
func scanStartTag(b []byte) (string, map[string]htmlAttr, int) {
	i := 1
	for i < len(b) && !isSpace(b[i]) && b[i] != '/' && b[i] != '>' {
		i++
	}
	name := strings.ToLower(string(b[1:i]))
	attrs := map[string]htmlAttr{}
	for i < len(b) {
		for i < len(b) && (isSpace(b[i]) || b[i] == '/') {
			i++
		}
		if i >= len(b) {
			break
		}
		if b[i] == '>' {
			return name, attrs, i + 1
		}
		start := i
		i++ // first char of a name may be '=' (as in Python)
		for i < len(b) && !isSpace(b[i]) && b[i] != '/' && b[i] != '=' && b[i] != '>' {
			i++
		}
		key := strings.ToLower(string(b[start:i]))
		k := i
		for k < len(b) && isSpace(b[k]) {
			k++
		}
		if k >= len(b) || b[k] != '=' {
			attrs[key] = htmlAttr{}
			continue
		}
		for k < len(b) && b[k] == '=' {
			k++
		}
		for k < len(b) && isSpace(b[k]) {
			k++
		}
		var val []byte
		switch {
		case k < len(b) && (b[k] == '"' || b[k] == '\''):
			q := b[k]
			e := bytes.IndexByte(b[k+1:], q)
			if e < 0 {
				return name, attrs, len(b)
			}
			val = b[k+1 : k+1+e]
			k += e + 2
		default:
			e := k
			for e < len(b) && !isSpace(b[e]) && b[e] != '>' {
				e++
			}
			val = b[k:e]
			k = e
		}
		attrs[key] = htmlAttr{value: html.UnescapeString(string(val)), hasValue: true}
		i = k
	}
	return name, attrs, len(b)
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

// indexFold is bytes.Index with ASCII case folding of sep (lower case).
func indexFold(b []byte, sep string) int {
	n, s := len(sep), []byte(sep)
	for i := 0; i+n <= len(b); i++ {
		if bytes.EqualFold(b[i:i+n], s) {
			return i
		}
	}
	return -1
}
