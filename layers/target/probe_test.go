package target

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeInterpreter writes an executable shell script standing in for python.
func fakeInterpreter(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodFacts = `{"abiflags": "", "elf": {"class": 2, "data": 1, "flags": 0, "machine": 62}, "gil_disabled": null, "glibc": "2.28", "has_d_pyd": false, "has_refcount": false, "implementation": "cpython", "is_32bit": false, "manylinux_module": false, "markers": {"implementation_name": "cpython", "implementation_version": "3.12.1", "os_name": "posix", "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "6.1", "platform_system": "Linux", "platform_version": "#1", "python_full_version": "3.12.1", "python_version": "3.12", "sys_platform": "linux"}, "musl_loader_output": null, "py_debug": 0, "soabi": "cpython-312-x86_64-linux-gnu", "sysconfig_platform": "linux-x86_64", "version": [3, 12]}`

func TestProbeFake(t *testing.T) {
	ctx := context.Background()
	tg, err := Probe(ctx, fakeInterpreter(t, "cat <<'EOF'\n"+goodFacts+"\nEOF"))
	if err != nil {
		t.Fatal(err)
	}
	if tg.Python != "3.12" || tg.PythonFull != "3.12.1" || tg.ABI != "cp312" || tg.Platform != "manylinux_2_28_x86_64" ||
		tg.Platforms[len(tg.Platforms)-1] != "linux_x86_64" || len(tg.Platforms) != 24+3+1 {
		t.Fatalf("got %+v", tg)
	}
}

func TestProbeEnvironment(t *testing.T) {
	// The probe must see a cleared environment, "/" as working directory and
	// -I -S -B (no bytecode written into the prefix); the fake prints facts only
	// when that holds.
	t.Setenv("PYLAYER_SECRET", "x")
	check := `[ "$1 $2 $3 $4" = "-I -S -B -c" ] && [ "$(pwd)" = / ] && [ "$(env | grep -v '^PWD=\|^SHLVL=\|^_=' | sort | tr '\n' ' ')" = "PATH=/usr/bin:/bin " ] || { env >&2; echo "bad env or args: $1 $2 $3 $4" >&2; exit 3; }`
	if _, err := Probe(context.Background(), fakeInterpreter(t, check+"\ncat <<'EOF'\n"+goodFacts+"\nEOF")); err != nil {
		t.Fatal(err)
	}
}

func TestProbeErrors(t *testing.T) {
	swap := func(old, new string) string {
		if !strings.Contains(goodFacts, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return "cat <<'EOF'\n" + strings.Replace(goodFacts, old, new, 1) + "\nEOF"
	}
	for _, tc := range []struct {
		name, body, interp string
		want               string
		wantErr            error
	}{
		{name: "relative", interp: "python3", want: "absolute path"},
		{name: "missing", interp: "/nonexistent/python3", want: "no such file"},
		{name: "fails", body: "echo 'Traceback: boom' >&2; exit 1", want: "Traceback: boom"},
		{name: "not json", body: "echo hello", want: "decoding probe output"},
		{name: "huge output", body: "head -c 2000000 /dev/zero", want: "exceeds"},
		{name: "unknown fact", body: swap(`"abiflags"`, `"new_fact": 1, "abiflags"`), want: "unknown field"},
		{name: "pypy", body: swap(`"implementation": "cpython"`, `"implementation": "pypy"`), wantErr: ErrUnsupported},
		{name: "python 3.7", body: swap(`"version": [3, 12]`, `"version": [3, 7]`), wantErr: ErrUnsupported},
		{name: "free-threaded", body: swap(`"gil_disabled": null`, `"gil_disabled": 1`), wantErr: ErrUnsupported},
		{name: "_manylinux", body: swap(`"manylinux_module": false`, `"manylinux_module": true`), wantErr: ErrUnsupported},
		{name: "darwin", body: swap(`"sysconfig_platform": "linux-x86_64"`, `"sysconfig_platform": "macosx-11.0-arm64"`), wantErr: ErrUnsupported},
		{name: "sparc", body: swap(`"sysconfig_platform": "linux-x86_64"`, `"sysconfig_platform": "linux-sparc64"`), wantErr: ErrUnsupported},
		{name: "glibc huge", body: swap(`"glibc": "2.28"`, `"glibc": "2.100000"`), wantErr: ErrUnsupported},
		{name: "markers wrong", body: swap(`"python_version": "3.12"`, `"python_version": "3.11"`), wantErr: ErrInvalidTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interp := tc.interp
			if interp == "" {
				interp = fakeInterpreter(t, tc.body)
			}
			_, err := Probe(context.Background(), interp)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("got %v, want %q / %v", err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestProbeTimeoutKillsGroup(t *testing.T) {
	// A child that keeps stdout open must not keep Probe waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Probe(ctx, fakeInterpreter(t, "sleep 30 & sleep 30"))
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 15*time.Second { // the children sleep 30 s
		t.Fatalf("Probe took %v after the deadline", d)
	}
}
