package sandbox

import (
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeFS is a host whose /bin, /sbin, /lib are symlinks into /usr, /lib64 a
// real directory and /lib32, /libx32 absent.
type fakeFS struct{}

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (f fakeInfo) Name() string       { return f.name }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

func (fakeFS) Lstat(name string) (fs.FileInfo, error) {
	switch name {
	case "/bin", "/sbin", "/lib":
		return fakeInfo{name, fs.ModeSymlink | 0o777}, nil
	case "/lib64":
		return fakeInfo{name, fs.ModeDir | 0o755}, nil
	}
	return nil, fs.ErrNotExist
}

func (fakeFS) Readlink(name string) (string, error) { return "usr" + name, nil }

func (fakeFS) EvalSymlinks(name string) (string, error) { return "/usr" + name, nil }

const bw = "/usr/bin/bwrap"

func mustArgv(t *testing.T, s Spec) []string {
	t.Helper()
	a, err := argv(fakeFS{}, bw, s)
	if err != nil {
		t.Fatalf("argv: %v", err)
	}
	return a
}

// envOf returns the variables the argv sets after --clearenv.
func envOf(t *testing.T, a []string) map[string]string {
	t.Helper()
	i := slices.Index(a, "--clearenv")
	if i < 0 {
		t.Fatal("no --clearenv")
	}
	env := map[string]string{}
	for j := 0; j < i; j++ {
		if a[j] == "--setenv" {
			t.Fatalf("--setenv before --clearenv at %d", j)
		}
	}
	for j := i + 1; j < len(a) && a[j] != "--"; j++ {
		if a[j] != "--setenv" {
			t.Fatalf("unexpected %q among the variables", a[j])
		}
		env[a[j+1]] = a[j+2]
		j += 2
	}
	return env
}

// hasSeq reports whether want appears as consecutive elements of a.
func hasSeq(a []string, want ...string) bool {
	for i := 0; i+len(want) <= len(a); i++ {
		if slices.Equal(a[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

func TestArgvLayers(t *testing.T) {
	const g = "/opt/pylayer/guard"
	L := "/opt/pylayer/layers/"
	tests := []struct {
		name     string
		layers   []Layer
		wantPP   string
		mounted  []string // host roots that must be mounted
		excluded []string // host roots that must not appear
	}{
		{"none", nil, g, nil, nil},
		{"base only", []Layer{{Root: "/c/base", Kind: KindBase}}, g + ":" + L + "0-base/site-packages", []string{"/c/base"}, nil},
		{"ext before base, in spec order",
			[]Layer{{Root: "/c/base", Kind: KindBase}, {Root: "/c/e1", Kind: KindExt}, {Root: "/c/e2", Kind: KindExt}},
			g + ":" + L + "1-ext/site-packages:" + L + "2-ext/site-packages:" + L + "0-base/site-packages",
			[]string{"/c/base", "/c/e1", "/c/e2"}, nil},
		{"iso replaces base",
			[]Layer{{Root: "/c/base", Kind: KindBase}, {Root: "/c/iso", Kind: KindIso}, {Root: "/c/e1", Kind: KindExt}},
			g + ":" + L + "2-ext/site-packages:" + L + "1-iso/site-packages",
			[]string{"/c/iso", "/c/e1"}, []string{"/c/base"}},
		{"ext without base", []Layer{{Root: "/c/e1", Kind: KindExt}}, g + ":" + L + "0-ext/site-packages", []string{"/c/e1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustArgv(t, Spec{Layers: tt.layers, Command: []string{"python3"}})
			if got := envOf(t, a)["PYTHONPATH"]; got != tt.wantPP {
				t.Errorf("PYTHONPATH = %q, want %q", got, tt.wantPP)
			}
			for i, l := range tt.layers {
				want := slices.Contains(tt.mounted, l.Root)
				got := hasSeq(a, "--ro-bind", l.Root, L+itoa(i)+"-"+l.Kind)
				if got != want {
					t.Errorf("layer %d %s mounted read-only = %v, want %v", i, l.Root, got, want)
				}
			}
			for _, x := range tt.excluded {
				if slices.Contains(a, x) {
					t.Errorf("%s appears in argv", x)
				}
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestArgvModes(t *testing.T) {
	tests := []struct {
		name      string
		spec      Spec
		want      [][]string
		notWant   [][]string
		degraded  bool
		wantChdir string
	}{
		{
			name: "degraded, tmpfs workspace",
			spec: Spec{Command: []string{"python3", "-c", "pass"}},
			want: [][]string{
				{"--symlink", "/usr/bin/python3", "/opt/python/bin/python3"},
				{"--tmpfs", "/workspace"},
				{"--", "python3", "-c", "pass"},
			},
			notWant:   [][]string{{"--share-net"}, {"--bind"}},
			degraded:  true,
			wantChdir: "/workspace",
		},
		{
			name: "interpreter and workspace",
			spec: Spec{Interpreter: "/cache/cpython", Workspace: "/srv/ws/abc", Command: []string{"/bin/true"}, Cwd: "/workspace/sub"},
			want: [][]string{
				{"--ro-bind", "/cache/cpython", "/opt/python"},
				{"--bind", "/srv/ws/abc", "/workspace"},
			},
			notWant:   [][]string{{"--symlink", "/usr/bin/python3", "/opt/python/bin/python3"}, {"--tmpfs", "/workspace"}},
			wantChdir: "/workspace/sub",
		},
		{
			name:      "network flag",
			spec:      Spec{Network: true, Command: []string{"true"}},
			want:      [][]string{{"--unshare-all", "--unshare-user", "--share-net"}},
			degraded:  true,
			wantChdir: "/workspace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustArgv(t, tt.spec)
			if a[0] != bw {
				t.Errorf("argv[0] = %q", a[0])
			}
			if tt.spec.Degraded() != tt.degraded {
				t.Errorf("Degraded() = %v", tt.spec.Degraded())
			}
			for _, w := range append(tt.want,
				[]string{"--unshare-all"}, []string{"--die-with-parent"}, []string{"--new-session"},
				[]string{"--clearenv"}, []string{"--proc", "/proc"}, []string{"--dev", "/dev"},
				[]string{"--tmpfs", "/tmp"}, []string{"--tmpfs", "/home"}, []string{"--remount-ro", "/"},
				[]string{"--cap-drop", "ALL"}, []string{"--chdir", tt.wantChdir},
				[]string{"--ro-bind", "/usr", "/usr"},
				[]string{"--symlink", "usr/bin", "/bin"}, []string{"--ro-bind", "/lib64", "/lib64"},
				[]string{"--perms", "0555", "--ro-bind-data", "3", "/opt/pylayer/bin/pip"},
				[]string{"--symlink", "pip", "/opt/pylayer/bin/pip3.11"},
			) {
				if !hasSeq(a, w...) {
					t.Errorf("argv lacks %q:\n%q", w, a)
				}
			}
			for _, w := range tt.notWant {
				if hasSeq(a, w...) {
					t.Errorf("argv has %q", w)
				}
			}
			if slices.Contains(a, "/lib32") {
				t.Error("absent /lib32 is mounted")
			}
			// The command follows "--" and the limits, and nothing after it is an
			// option for bwrap.
			lim, _ := Limits{}.withDefaults()
			want := append(limitPrefix(lim), tt.spec.Command...)
			if i := slices.Index(a, "--"); !slices.Equal(a[i+1:], want) {
				t.Errorf("command = %q, want %q", a[i+1:], want)
			}
		})
	}
}

func TestArgvEnvironment(t *testing.T) {
	t.Setenv("PATH", "/evil/bin:/usr/bin")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "canary-aws")
	t.Setenv("PYTHONPATH", "/evil/py")
	a := mustArgv(t, Spec{Command: []string{"env"}, Env: map[string]string{"LANG": "en_US.UTF-8"},
		Layers: []Layer{{Root: "/c/b", Kind: KindBase}}})
	want := map[string]string{
		"PATH":                    "/opt/python/bin:/opt/pylayer/bin:/opt/pylayer/layers/0-base/bin:/usr/local/bin:/usr/bin:/bin",
		"PYTHONPATH":              "/opt/pylayer/guard:/opt/pylayer/layers/0-base/site-packages",
		"PIP_NO_INDEX":            "1",
		"PYTHONDONTWRITEBYTECODE": "1",
		"PYTHONNOUSERSITE":        "1",
		"HOME":                    "/home/sandbox",
		"USER":                    "sandbox",
		"LOGNAME":                 "sandbox",
		"LANG":                    "en_US.UTF-8",
		"MPLBACKEND":              "Agg",
		"XDG_CACHE_HOME":          "/home/sandbox/.cache",
		"MPLCONFIGDIR":            "/home/sandbox/.cache/matplotlib",
	}
	got := envOf(t, a)
	if len(got) != len(want) {
		t.Errorf("environment = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, x := range a {
		if strings.Contains(x, "canary") || strings.Contains(x, "/evil") {
			t.Errorf("the caller's environment leaked into argv: %q", x)
		}
	}
}

func TestArgvNoHostPrivateDirs(t *testing.T) {
	a := mustArgv(t, Spec{Command: []string{"true"}, Layers: []Layer{{Root: "/c/b", Kind: KindBase}}})
	allowedEtc := map[string]bool{}
	for _, f := range etcFiles {
		allowedEtc[f] = true
	}
	for i, x := range a {
		if x == "--ro-bind-try" && a[i+1] == "/var/cache/fontconfig" {
			continue // the system's font cache, read-only
		}
		switch x {
		case "--bind", "--ro-bind", "--ro-bind-try", "--bind-try", "--dev-bind", "--dev-bind-try":
		default:
			continue
		}
		src := a[i+1]
		if x == "--ro-bind" && src == "/proc/sys" && a[i+2] == "/proc/sys" {
			continue // the sandbox's own /proc/sys, made read-only
		}
		for _, bad := range []string{"/home", "/root", "/var", "/run", "/tmp", "/proc", "/sys", "/dev", "/"} {
			if src == bad || (bad != "/" && strings.HasPrefix(src, bad+"/")) {
				t.Errorf("%s %s binds a private host directory", x, src)
			}
		}
		if (src == "/etc" || strings.HasPrefix(src, "/etc/")) && !allowedEtc[src] {
			t.Errorf("%s %s: not one of the allowed /etc files", x, src)
		}
		if x == "--bind" {
			t.Errorf("read-write bind %s without a workspace", src)
		}
	}
}

func TestArgvRefused(t *testing.T) {
	ok := Spec{Command: []string{"true"}}
	with := func(f func(*Spec)) Spec { s := ok; f(&s); return s }
	tests := []struct {
		name   string
		bwrap  string
		spec   Spec
		secret bool
	}{
		{"secret AWS", bw, with(func(s *Spec) { s.Env = map[string]string{"AWS_SECRET_ACCESS_KEY": "x"} }), true},
		{"secret OpenAI", bw, with(func(s *Spec) { s.Env = map[string]string{"OPENAI_API_KEY": "x"} }), true},
		{"secret registry", bw, with(func(s *Spec) { s.Env = map[string]string{"REGISTRY_PASSWORD": "x"} }), true},
		{"secret lower case", bw, with(func(s *Spec) { s.Env = map[string]string{"my_api_key": "x"} }), true},
		{"secret token", bw, with(func(s *Spec) { s.Env = map[string]string{"GITHUB_TOKEN": "x"} }), true},
		{"secret cosign", bw, with(func(s *Spec) { s.Env = map[string]string{"COSIGN_PASSWORD": "x"} }), true},
		{"secret auth", bw, with(func(s *Spec) { s.Env = map[string]string{"HTTP_AUTHORIZATION": "x"} }), true},
		{"secret credentials", bw, with(func(s *Spec) { s.Env = map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"} }), true},
		{"reserved PATH", bw, with(func(s *Spec) { s.Env = map[string]string{"PATH": "/x"} }), false},
		{"reserved PYTHONPATH", bw, with(func(s *Spec) { s.Env = map[string]string{"PYTHONPATH": "/x"} }), false},
		{"reserved HOME", bw, with(func(s *Spec) { s.Env = map[string]string{"HOME": "/root"} }), false},
		{"reserved LD_PRELOAD", bw, with(func(s *Spec) { s.Env = map[string]string{"LD_PRELOAD": "/x.so"} }), false},
		{"reserved PIP_INDEX_URL", bw, with(func(s *Spec) { s.Env = map[string]string{"PIP_INDEX_URL": "http://x"} }), false},
		{"bad env name", bw, with(func(s *Spec) { s.Env = map[string]string{"A=B": "x"} }), false},
		{"empty env name", bw, with(func(s *Spec) { s.Env = map[string]string{"": "x"} }), false},
		{"NUL env value", bw, with(func(s *Spec) { s.Env = map[string]string{"FOO": "a\x00b"} }), false},
		{"relative layer", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "layers/x", Kind: KindBase}} }), false},
		{"option-like layer", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "--bind / /x", Kind: KindBase}} }), false},
		{"option-like layer 2", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "--bind", Kind: KindExt}} }), false},
		{"NUL in layer", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/a\x00b", Kind: KindBase}} }), false},
		{"root as layer", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/", Kind: KindBase}} }), false},
		{"unclean layer", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/a/../etc", Kind: KindBase}} }), false},
		{"layer in /proc", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/proc/1/root", Kind: KindBase}} }), false},
		{"unknown kind", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/a", Kind: "overlay"}} }), false},
		{"two bases", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/a", Kind: KindBase}, {Root: "/b", Kind: KindBase}} }), false},
		{"two isos", bw, with(func(s *Spec) { s.Layers = []Layer{{Root: "/a", Kind: KindIso}, {Root: "/b", Kind: KindIso}} }), false},
		{"root workspace", bw, with(func(s *Spec) { s.Workspace = "/" }), false},
		{"relative workspace", bw, with(func(s *Spec) { s.Workspace = "ws" }), false},
		{"relative interpreter", bw, with(func(s *Spec) { s.Interpreter = "./py" }), false},
		{"dev interpreter", bw, with(func(s *Spec) { s.Interpreter = "/dev/shm/py" }), false},
		{"relative cwd", bw, with(func(s *Spec) { s.Cwd = "workspace" }), false},
		{"no command", bw, with(func(s *Spec) { s.Command = nil }), false},
		{"empty program", bw, with(func(s *Spec) { s.Command = []string{""} }), false},
		{"NUL in argument", bw, with(func(s *Spec) { s.Command = []string{"echo", "a\x00b"} }), false},
		{"relative bwrap", "bwrap", ok, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := argv(fakeFS{}, tt.bwrap, tt.spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v (argv %q), want ErrInvalidSpec", err, a)
			}
			if errors.Is(err, ErrSecretEnv) != tt.secret {
				t.Errorf("errors.Is(%v, ErrSecretEnv) = %v, want %v", err, !tt.secret, tt.secret)
			}
			if tt.secret && strings.Contains(err.Error(), `"x"`) {
				t.Errorf("error reveals the value: %v", err)
			}
		})
	}
}

func TestDataFiles(t *testing.T) {
	a := mustArgv(t, Spec{Command: []string{"true"}})
	var fds []string
	for i, x := range a {
		if x == "--ro-bind-data" {
			fds = append(fds, a[i+1])
		}
	}
	d := DataFiles()
	if len(fds) != len(d) {
		t.Fatalf("argv reads %d data descriptors, DataFiles has %d", len(fds), len(d))
	}
	for i := range d {
		if !slices.Contains(fds, itoa(3+i)) {
			t.Errorf("descriptor %d of DataFiles()[%d] is not read by argv", 3+i, i)
		}
		if len(d[i]) == 0 || len(d[i]) >= 4096 {
			t.Errorf("DataFiles()[%d] has %d bytes; Run writes them into a pipe before starting bwrap", i, len(d[i]))
		}
	}
	d[0][0] = 'X'
	if DataFiles()[0][0] == 'X' {
		t.Error("DataFiles returns shared memory")
	}
}

// TestArgvHardening: the hardening flags and limits are on every command line,
// as data: no nested user namespaces, read-only kernel knobs, sized tmpfs mounts,
// the command run under prlimit.
func TestArgvHardening(t *testing.T) {
	lim := Limits{Processes: 64, Memory: 1 << 30, CPU: 90 * time.Second, OpenFiles: 256, FileSize: 1 << 20,
		Tmp: 8 << 20, Home: 4 << 20, Shm: 2 << 20}
	a := mustArgv(t, Spec{Command: []string{"python3"}, Limits: lim})
	for _, w := range [][]string{
		{"--unshare-all", "--unshare-user"}, {"--disable-userns"}, {"--cap-drop", "ALL"},
		{"--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"},
		{"--dev", "/dev", "--size", "2097152", "--tmpfs", "/dev/shm", "--remount-ro", "/dev"},
		{"--size", "8388608", "--tmpfs", "/tmp"}, {"--size", "4194304", "--tmpfs", "/home"},
		{"--size", "8388608", "--tmpfs", "/workspace"},
		{"--", Prlimit, "--nproc=64", "--as=1073741824", "--nofile=256", "--fsize=1048576", "--core=0", "--cpu=90:91", "--", "python3"},
	} {
		if !hasSeq(a, w...) {
			t.Errorf("argv lacks %q:\n%q", w, a)
		}
	}
	p, err := build(fakeFS{}, bw, Spec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{"--seccomp"} {
		if i := slices.Index(p.Args, opt); i > 0 {
			n, _ := strconv.Atoi(p.Args[i+1])
			if n < firstDataFD || n-firstDataFD >= len(p.Files) {
				t.Errorf("%s %s names no descriptor of the plan", opt, p.Args[i+1])
			}
		}
	}
	for _, bad := range []Limits{{Processes: -1}, {Memory: 1 << 20}, {CPU: time.Millisecond}, {OpenFiles: 3}, {Tmp: -5}} {
		if _, err := argv(fakeFS{}, bw, Spec{Command: []string{"true"}, Limits: bad}); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("limits %+v: err = %v, want ErrInvalidSpec", bad, err)
		}
	}
}

// TestArgvPath: the layers' bin/ are on PATH after the interpreter's and the pip
// shim's, in PYTHONPATH order (ext before base, iso in place of the base), before
// the system's; the variables a headless matplotlib needs are set and can be
// overridden.
func TestArgvPath(t *testing.T) {
	const L = "/opt/pylayer/layers/"
	const head, tail = "/opt/python/bin:/opt/pylayer/bin:", "/usr/local/bin:/usr/bin:/bin"
	tests := []struct {
		name   string
		layers []Layer
		want   string
	}{
		{"none", nil, head + tail},
		{"base", []Layer{{Root: "/c/b", Kind: KindBase}}, head + L + "0-base/bin:" + tail},
		{"ext before base", []Layer{{Root: "/c/b", Kind: KindBase}, {Root: "/c/e1", Kind: KindExt}, {Root: "/c/e2", Kind: KindExt}},
			head + L + "1-ext/bin:" + L + "2-ext/bin:" + L + "0-base/bin:" + tail},
		{"iso replaces base", []Layer{{Root: "/c/b", Kind: KindBase}, {Root: "/c/i", Kind: KindIso}, {Root: "/c/e", Kind: KindExt}},
			head + L + "2-ext/bin:" + L + "1-iso/bin:" + tail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := envOf(t, mustArgv(t, Spec{Layers: tt.layers, Command: []string{"true"}}))
			if env["PATH"] != tt.want {
				t.Errorf("PATH = %q, want %q", env["PATH"], tt.want)
			}
			if strings.Contains(env["PATH"], "0-base") && len(tt.layers) > 1 && tt.layers[1].Kind == KindIso {
				t.Errorf("PATH names the base an iso layer replaces: %q", env["PATH"])
			}
		})
	}
	if Path != head+tail {
		t.Errorf("Path = %q, want the PATH of a sandbox without layers, %q", Path, head+tail)
	}
	env := envOf(t, mustArgv(t, Spec{Command: []string{"true"}, Env: map[string]string{"MPLBACKEND": "svg"}}))
	if env["MPLBACKEND"] != "svg" {
		t.Errorf("MPLBACKEND = %q, want the caller's svg over the default Agg", env["MPLBACKEND"])
	}
}

// TestArgvFonts: fontconfig's configuration and the system font cache are bound
// read-only, when present (bwrap's -try), and /etc/matplotlibrc never.
func TestArgvFonts(t *testing.T) {
	a := mustArgv(t, Spec{Command: []string{"fc-match", "sans"}})
	for _, w := range [][]string{
		{"--ro-bind-try", "/etc/fonts", "/etc/fonts"},
		{"--ro-bind-try", "/var/cache/fontconfig", "/var/cache/fontconfig"},
		{"--ro-bind", "/usr", "/usr"}, // /usr/share/fonts
	} {
		if !hasSeq(a, w...) {
			t.Errorf("argv lacks %q", w)
		}
	}
	for _, x := range a {
		if strings.Contains(x, "matplotlibrc") {
			t.Errorf("argv names %q", x)
		}
	}
}

// TestArgvCache: Spec.Cache is bound read-write at the cache directory, after the
// tmpfs home it lives in, and only when given; it must be a valid host path and
// not the workspace.
func TestArgvCache(t *testing.T) {
	a := mustArgv(t, Spec{Command: []string{"true"}, Cache: "/var/cache/pylayer/sessions/s1/cache"})
	bind := slices.Index(a, "/var/cache/pylayer/sessions/s1/cache")
	if bind < 1 || a[bind-1] != "--bind" || a[bind+1] != "/home/sandbox/.cache" {
		t.Fatalf("argv lacks --bind CACHE /home/sandbox/.cache:\n%q", a)
	}
	home := slices.Index(a, "/home")
	if home < 0 || home > bind {
		t.Errorf("the cache is bound before the tmpfs /home that would hide it:\n%q", a)
	}
	if !hasSeq(a, "--perms", "0700", "--dir", "/home/sandbox") {
		t.Errorf("argv lacks the sandbox's home")
	}
	env := envOf(t, a)
	if env["XDG_CACHE_HOME"] != CacheDir || !strings.HasPrefix(env["MPLCONFIGDIR"], CacheDir+"/") {
		t.Errorf("XDG_CACHE_HOME = %q, MPLCONFIGDIR = %q: want both in %s", env["XDG_CACHE_HOME"], env["MPLCONFIGDIR"], CacheDir)
	}
	if hasSeq(mustArgv(t, Spec{Command: []string{"true"}}), "--bind") {
		t.Error("a read-write bind without a cache or workspace")
	}
	for _, bad := range []Spec{
		{Command: []string{"true"}, Cache: "cache"},
		{Command: []string{"true"}, Cache: "/"},
		{Command: []string{"true"}, Cache: "/c/../etc"},
		{Command: []string{"true"}, Cache: "/proc/self/cwd"},
		{Command: []string{"true"}, Cache: "/srv/ws", Workspace: "/srv/ws"},
	} {
		if _, err := argv(fakeFS{}, bw, bad); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("cache %q (workspace %q): err = %v, want ErrInvalidSpec", bad.Cache, bad.Workspace, err)
		}
	}
}

// linkFS is a host of symlinks: link name -> target, and where each finally resolves.
type linkFS map[string][2]string

func (l linkFS) Lstat(name string) (fs.FileInfo, error) {
	if _, ok := l[name]; ok {
		return fakeInfo{name, fs.ModeSymlink | 0o777}, nil
	}
	return fakeInfo{name, 0o644}, nil
}
func (l linkFS) Readlink(name string) (string, error)     { return l[name][0], nil }
func (l linkFS) EvalSymlinks(name string) (string, error) { return l[name][1], nil }

// TestUsrSymlink: a host file that links into /usr, and resolves there, becomes the
// same symlink in the sandbox; anything else stays a bind.
func TestUsrSymlink(t *testing.T) {
	host := linkFS{
		"/etc/rel":     {"../usr/share/zoneinfo/Etc/UTC", "/usr/share/zoneinfo/Etc/UTC"},
		"/etc/abs":     {"/usr/share/zoneinfo/UTC", "/usr/share/zoneinfo/Etc/UTC"},
		"/etc/out":     {"/opt/zoneinfo/UTC", "/opt/zoneinfo/UTC"},
		"/etc/escapes": {"/usr/share/zoneinfo/UTC", "/var/lib/UTC"}, // a link in /usr leads out
		"/etc/usrx":    {"/usrx/UTC", "/usrx/UTC"},
		"/etc/dotdot":  {"/usr/../etc/shadow", "/etc/shadow"},
		"/etc/empty":   {"", ""},
	}
	for p, want := range map[string]bool{"/etc/rel": true, "/etc/abs": true, "/etc/out": false, "/etc/escapes": false,
		"/etc/usrx": false, "/etc/dotdot": false, "/etc/empty": false, "/etc/plain": false} {
		target, ok := usrSymlink(host, p)
		if ok != want || (ok && target != host[p][0]) {
			t.Errorf("%s: %q, %v; want %v", p, target, ok, want)
		}
	}
	a := strings.Join(mustArgv(t, Spec{Command: []string{"true"}}), " ")
	if !strings.Contains(a, "--ro-bind-try /etc/localtime /etc/localtime") {
		t.Errorf("a host without the link binds /etc/localtime: %s", a)
	}
}
