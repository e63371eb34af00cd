package sandbox

import "testing"

func TestTerminalSafe(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text\n\tindented", "plain text\n\tindented"},
		{"\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"back\rover\bx", `back\x0dover\x08x`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"del\x7f", `del\x7f`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"ünïcödé ok ✓", "ünïcödé ok ✓"},
	}
	for _, tt := range tests {
		if got := string(TerminalSafe([]byte(tt.in))); got != tt.want {
			t.Errorf("TerminalSafe(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "512M": 512 << 20, "512MiB": 512 << 20,
		"2GB": 2 << 30, "1g": 1 << 30, " 64 KiB ": 64 << 10, "1T": 1 << 40, "10B": 10} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5G", "G", "12X", "99999999999T"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func FuzzTerminalSafe(f *testing.F) {
	f.Add([]byte("\x1b[31mred\x1b[0m\n"))
	f.Add([]byte{0xc2, 0x9b, 0xff, 0x07})
	f.Fuzz(func(t *testing.T, b []byte) {
		out := TerminalSafe(b)
		for _, c := range out {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				t.Fatalf("control byte %#x left in %q", c, out)
			}
		}
		for i := 0; i+1 < len(out); i++ {
			if out[i] == 0xc2 && out[i+1] >= 0x80 && out[i+1] <= 0x9f {
				t.Fatalf("C1 control left in %q", out)
			}
		}
	})
}
