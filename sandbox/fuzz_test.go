package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// bwrapArity is the number of operands of each option Argv may emit.
var bwrapArity = map[string]int{
	"--unshare-all": 0, "--unshare-user": 0, "--share-net": 0, "--die-with-parent": 0,
	"--new-session": 0, "--clearenv": 0, "--disable-userns": 0,
	"--size": 1, "--seccomp": 1, "--info-fd": 1, "--block-fd": 1,
	"--uid": 1, "--gid": 1, "--hostname": 1, "--cap-drop": 1, "--perms": 1, "--proc": 1,
	"--dev": 1, "--tmpfs": 1, "--dir": 1, "--remount-ro": 1, "--chdir": 1,
	"--ro-bind": 2, "--ro-bind-try": 2, "--bind": 2, "--symlink": 2, "--ro-bind-data": 2, "--setenv": 2,
}

// FuzzArgv: whatever the Spec, Argv either refuses it with ErrInvalidSpec or
// returns a command line in which every option sits where bwrap expects an
// option, every mount source and destination is an absolute path, no element
// holds a NUL, no secret-looking variable is set, and the command follows "--"
// unchanged.
func FuzzArgv(f *testing.F) {
	f.Add("/usr/bin/bwrap", "", "", "", "/c/base", "base", "/c/ext", "ext", "", "", "MPLBACKEND", "Agg", "python3", "-c", false)
	f.Add("/usr/bin/bwrap", "/c/py", "/ws", "/workspace/x", "--bind / /x", "base", "/c/e", "ext", "/c/i", "iso", "AWS_SECRET_ACCESS_KEY", "x", "--bind", "/", true)
	f.Add("bwrap", "rel", "/", "rel", "/a/../b", "ext", "/proc/1/root", "iso", "/a\x00b", "base", "PATH", "/evil", "", "--", false)
	f.Add("/b", "/c", "/d", "/", "/x", "ext", "/x", "ext", "/y", "ext", "LANG", "C", "--setenv", "PATH", false)
	f.Fuzz(func(t *testing.T, bwrap, interp, ws, cwd, r1, k1, r2, k2, r3, k3, ek, ev, c0, c1 string, network bool) {
		s := Spec{Interpreter: interp, Workspace: ws, Cwd: cwd, Network: network,
			Env: map[string]string{ek: ev}, Command: []string{c0, c1}}
		for _, l := range [][2]string{{r1, k1}, {r2, k2}, {r3, k3}} {
			if l[0] != "" || l[1] != "" {
				s.Layers = append(s.Layers, Layer{Root: l[0], Kind: l[1]})
			}
		}
		a, err := argv(fakeFS{}, bwrap, s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %v does not match ErrInvalidSpec", err)
			}
			return
		}
		if a[0] != bwrap || !strings.HasPrefix(bwrap, "/") {
			t.Fatalf("argv[0] = %q", a[0])
		}
		i := 1
		for ; i < len(a) && a[i] != "--"; i++ {
			n, ok := bwrapArity[a[i]]
			if !ok {
				t.Fatalf("argv[%d] = %q where bwrap expects an option: %q", i, a[i], a)
			}
			if i+n >= len(a) {
				t.Fatalf("option %q lacks operands", a[i])
			}
			ops := a[i+1 : i+1+n]
			switch a[i] {
			case "--ro-bind", "--ro-bind-try", "--bind":
				for _, p := range ops {
					if !strings.HasPrefix(p, "/") || checkSandboxPath("mount", p) != nil {
						t.Fatalf("%s operand %q is not a clean absolute path", a[i], p)
					}
				}
			case "--setenv":
				if secretRE().MatchString(ops[0]) {
					t.Fatalf("secret-looking variable %q set", ops[0])
				}
			}
			for _, p := range ops {
				if strings.IndexByte(p, 0) >= 0 {
					t.Fatalf("NUL in %q operand", a[i])
				}
			}
			i += n
		}
		if i >= len(a) {
			t.Fatal("no -- before the command")
		}
		lim, _ := Limits{}.withDefaults()
		pre := limitPrefix(lim)
		if !slices.Equal(a[i+1:i+1+len(pre)], pre) {
			t.Fatalf("the command does not start with the limits %q: %q", pre, a[i+1:])
		}
		cmd := a[i+1+len(pre):]
		if len(cmd) != len(s.Command) || cmd[0] != c0 || cmd[1] != c1 {
			t.Fatalf("command %q, want %q", cmd, s.Command)
		}
	})
}
