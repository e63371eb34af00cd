package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// TerminalSafe returns b with every control sequence neutralised, for output
// of a session that reaches a terminal: C0 controls other than tab and newline,
// DEL and the C1 controls (U+0080 to U+009F) are shown as Go escapes (\x1b,
// \u009b ...), so that a session cannot move the cursor, retitle the window,
// rewrite earlier lines or drive the terminal's own escape sequences. Invalid
// UTF-8 is shown byte by byte the same way. Anything else is left as it is.
func TerminalSafe(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = fmt.Appendf(out, `\x%02x`, b[i])
		case r == '\n' || r == '\t':
			out = append(out, b[i])
		case r < 0x20 || r == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// ParseSize reads a byte size: a whole number of bytes, or one with a suffix
// K, M, G, T (powers of 1024, with or without "iB" or "B": 512M, 512MiB, 2GB).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	up := strings.ToUpper(t)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
		{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(up, u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.m
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: want bytes, or a number with K, M, G or T (e.g. 512MiB)", s)
	}
	return n * mult, nil
}
