package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func itoa(i int) string { return strconv.Itoa(i) }

func mustFromFlags(t testing.TB, python, platform string) Target {
	t.Helper()
	tg, err := FromFlags(python, platform)
	if err != nil {
		t.Fatalf("FromFlags(%q, %q): %v", python, platform, err)
	}
	return tg
}

func TestFromFlags(t *testing.T) {
	for _, tc := range []struct {
		python, platform     string
		wantPython, wantFull string
		wantABI, wantMachine string
		wantFirst, wantLast  string
		wantLen              int
	}{
		{"3.11", "manylinux_2_28_x86_64", "3.11", "3.11.0", "cp311", "x86_64", "manylinux_2_28_x86_64", "manylinux1_x86_64", 24 + 3},
		{"3.11.7", "manylinux_2_17_aarch64", "3.11", "3.11.7", "cp311", "aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", 2},
		{"3.12", "musllinux_1_2_aarch64", "3.12", "3.12.0", "cp312", "aarch64", "musllinux_1_2_aarch64", "musllinux_1_0_aarch64", 3},
		{"3.11", "linux_x86_64", "3.11", "3.11.0", "cp311", "x86_64", "linux_x86_64", "linux_x86_64", 1},
		{"3.8", "manylinux_2_5_x86_64", "3.8", "3.8.0", "cp38", "x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", 2},
		{"3.10.13", "linux_riscv64", "3.10", "3.10.13", "cp310", "riscv64", "linux_riscv64", "linux_riscv64", 1},
	} {
		t.Run(tc.python+"/"+tc.platform, func(t *testing.T) {
			tg := mustFromFlags(t, tc.python, tc.platform)
			if tg.Python != tc.wantPython || tg.PythonFull != tc.wantFull || tg.ABI != tc.wantABI || tg.Implementation != "cp" {
				t.Errorf("got python %q full %q abi %q impl %q", tg.Python, tg.PythonFull, tg.ABI, tg.Implementation)
			}
			if tg.Platform != tc.platform || tg.Platforms[0] != tc.wantFirst || tg.Platforms[len(tg.Platforms)-1] != tc.wantLast || len(tg.Platforms) != tc.wantLen {
				t.Errorf("platforms %v", tg.Platforms)
			}
			m := tg.Markers
			if m["platform_machine"] != tc.wantMachine || m["python_full_version"] != tc.wantFull || m["implementation_version"] != tc.wantFull ||
				m["python_version"] != tc.wantPython || m["platform_release"] != "" || m["platform_version"] != "" ||
				m["sys_platform"] != "linux" || m["os_name"] != "posix" || m["implementation_name"] != "cpython" {
				t.Errorf("markers %v", m)
			}
			if slices.Contains(tg.Platforms, "linux_"+tc.wantMachine) != strings.HasPrefix(tc.platform, "linux_") {
				t.Errorf("linux_ARCH present only for a linux_ARCH floor: %v", tg.Platforms)
			}
		})
	}
}

func TestFromFlagsErrors(t *testing.T) {
	for _, tc := range []struct {
		python, platform string
		want             error
		wantMsg          string
	}{
		{"3", "linux_x86_64", ErrInvalidPython, "--python"},
		{"2.7", "linux_x86_64", ErrInvalidPython, "want 3.MINOR"},
		{"3.7", "linux_x86_64", ErrInvalidPython, "supports CPython 3.8"},
		{"3.011", "linux_x86_64", ErrInvalidPython, "supports"},
		{"3.11.07", "linux_x86_64", ErrInvalidPython, "plain decimal"},
		{" 3.11", "linux_x86_64", ErrInvalidPython, "want 3.MINOR"},
		{"3.11.x", "linux_x86_64", ErrInvalidPython, "want 3.MINOR"},
		{"3.11", "", ErrInvalidPlatform, "--platform: invalid platform: \"\": want manylinux_2_N_ARCH, musllinux_1_N_ARCH or linux_ARCH"},
		{"3.11", "manylinux2014_x86_64", ErrInvalidPlatform, "manylinux_2_17_x86_64"},
		{"3.11", "manylinux_2_4_x86_64", ErrInvalidPlatform, "oldest manylinux for x86_64 is manylinux_2_5_x86_64"},
		{"3.11", "manylinux_2_16_aarch64", ErrInvalidPlatform, "manylinux_2_17_aarch64"},
		{"3.11", "manylinux_3_1_x86_64", ErrInvalidPlatform, "glibc major"},
		{"3.11", "manylinux_2_028_x86_64", ErrInvalidPlatform, "plain decimal"},
		{"3.11", "manylinux_2_100_x86_64", ErrInvalidPlatform, "implausible"},
		{"3.11", "manylinux_2_31_riscv64", ErrInvalidPlatform, "use linux_riscv64"},
		{"3.11", "musllinux_2_1_x86_64", ErrInvalidPlatform, "musl major"},
		{"3.11", "linux_x86-64", ErrInvalidPlatform, "unknown architecture"},
		{"3.11", "linux_sparc", ErrInvalidPlatform, "unknown architecture"},
		{"3.11", "macosx_11_0_arm64", ErrInvalidPlatform, "want manylinux_2_N_ARCH"},
		{"3.11", "Manylinux_2_28_x86_64", ErrInvalidPlatform, "want manylinux_2_N_ARCH"},
	} {
		t.Run(tc.python+"/"+tc.platform, func(t *testing.T) {
			_, err := FromFlags(tc.python, tc.platform)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("got %v, want %v containing %q", err, tc.want, tc.wantMsg)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Target)
		want   error
	}{
		{"ok", func(*Target) {}, nil},
		{"debug abi", func(t *Target) { t.ABI = "cp311d" }, nil},
		{"rc full", func(t *Target) { t.PythonFull = "3.11.0rc1"; t.Markers["python_full_version"] = "3.11.0rc1" }, nil},
		{"pypy", func(t *Target) { t.Implementation = "pp" }, ErrUnsupported},
		{"abi", func(t *Target) { t.ABI = "cp310" }, ErrInvalidTarget},
		{"python", func(t *Target) { t.Python = "3.x" }, ErrInvalidPython},
		{"full mismatch", func(t *Target) { t.PythonFull = "3.12.1" }, ErrInvalidPython},
		{"floor not first", func(t *Target) { t.Platforms = t.Platforms[1:] }, ErrInvalidTarget},
		{"no platforms", func(t *Target) { t.Platforms = nil }, ErrInvalidTarget},
		{"dup platform", func(t *Target) { t.Platforms = append(t.Platforms, t.Platforms[1]) }, ErrInvalidTarget},
		{"other arch", func(t *Target) { t.Platforms = append(t.Platforms, "linux_aarch64") }, ErrInvalidTarget},
		{"garbage platform", func(t *Target) { t.Platforms = append(t.Platforms, "any") }, ErrInvalidTarget},
		{"bad floor", func(t *Target) { t.Platform = "win_amd64" }, ErrInvalidPlatform},
		{"marker missing", func(t *Target) { delete(t.Markers, "os_name") }, ErrInvalidTarget},
		{"marker extra", func(t *Target) { t.Markers["extra"] = "x" }, ErrInvalidTarget},
		{"marker wrong", func(t *Target) { t.Markers["python_version"] = "3.12" }, ErrInvalidTarget},
		{"marker empty machine", func(t *Target) { t.Markers["platform_machine"] = "" }, ErrInvalidTarget},
		{"nil markers", func(t *Target) { t.Markers = nil }, ErrInvalidTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := mustFromFlags(t, "3.11", "manylinux_2_28_x86_64")
			tc.mutate(&tg)
			err := tg.Validate()
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, f := range [][2]string{{"3.11", "manylinux_2_28_x86_64"}, {"3.12.1", "musllinux_1_2_aarch64"}, {"3.9", "linux_riscv64"}} {
		tg := mustFromFlags(t, f[0], f[1])
		b1, err := json.Marshal(tg)
		if err != nil {
			t.Fatal(err)
		}
		var back Target
		if err := json.Unmarshal(b1, &back); err != nil {
			t.Fatal(err)
		}
		b2, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("not stable:\n%s\n%s", b1, b2)
		}
		if !slices.Equal(tagStrings(back.Tags()), tagStrings(tg.Tags())) {
			t.Fatal("tags differ after round trip")
		}
	}
	// The canonical form is pinned: changing it changes every layer key.
	tg := mustFromFlags(t, "3.11", "manylinux_2_17_aarch64")
	b, _ := json.Marshal(tg)
	const want = `{"python":"3.11","python_full":"3.11.0","implementation":"cp","abi":"cp311","platform":"manylinux_2_17_aarch64","platforms":["manylinux_2_17_aarch64","manylinux2014_aarch64"],"markers":{"implementation_name":"cpython","implementation_version":"3.11.0","os_name":"posix","platform_machine":"aarch64","platform_python_implementation":"CPython","platform_release":"","platform_system":"Linux","platform_version":"","python_full_version":"3.11.0","python_version":"3.11","sys_platform":"linux"}}`
	if string(b) != want {
		t.Fatalf("canonical JSON changed:\n got %s\nwant %s", b, want)
	}
}

func TestJSONRejects(t *testing.T) {
	good, _ := json.Marshal(mustFromFlags(t, "3.11", "linux_x86_64"))
	for name, in := range map[string]string{
		"unknown field": strings.Replace(string(good), `"python":`, `"extra":1,"python":`, 1),
		"invalid":       strings.Replace(string(good), `"abi":"cp311"`, `"abi":"cp312"`, 1),
		"not object":    `[]`,
		"null markers":  strings.Replace(string(good), `"markers":{`, `"markers":null,"x":{`, 1),
	} {
		var tg Target
		if err := json.Unmarshal([]byte(in), &tg); err == nil {
			t.Errorf("%s: accepted %s", name, in)
		}
	}
	if _, err := json.Marshal(Target{}); !errors.Is(err, ErrInvalidPython) {
		t.Errorf("marshaling zero Target: %v", err)
	}
}
