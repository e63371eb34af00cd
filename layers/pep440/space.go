package pep440

import (
	"unicode"
	"unicode/utf8"
)

// IsSpace reports whether r is whitespace in Python's sense (str.isspace and
// the \s class of str regular expressions): Go's unicode.IsSpace plus the
// four information separators U+001C..U+001F.
func IsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// TrimSpace removes leading and trailing whitespace as Python's str.strip()
// does.
func TrimSpace(s string) string {
	start, end := 0, len(s)
	for start < end {
		r, n := utf8.DecodeRuneInString(s[start:])
		if !IsSpace(r) {
			break
		}
		start += n
	}
	for end > start {
		r, n := utf8.DecodeLastRuneInString(s[start:end])
		if !IsSpace(r) {
			break
		}
		end -= n
	}
	return s[start:end]
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
