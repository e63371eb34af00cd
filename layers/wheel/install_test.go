package wheel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(s[:])
}

// assertNothingLeft checks that neither dest nor a temporary sibling exists.
func assertNothingLeft(t *testing.T, dest string) {
	t.Helper()
	if _, err := os.Lstat(dest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s exists after a failed install (%v)", dest, err)
	}
	left, _ := filepath.Glob(dest + "*")
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestInstallRejects(t *testing.T) {
	base := fixture.Wheel{Name: "bad", Version: "1.0"}
	mod := func(f func(w *fixture.Wheel)) string {
		return writeWheel(t, func() fixture.Wheel { w := base; f(&w); return w }())
	}
	file := func(p string, mode fs.FileMode) []fixture.File {
		return []fixture.File{{Path: "bad/__init__.py", Data: []byte("")}, {Path: p, Data: []byte("x"), Mode: mode}}
	}
	goodRecord := fixture.Record(base.Members()[:len(base.Members())-1], "bad-1.0.dist-info/RECORD")
	bigZeros := make([]byte, 4<<20)
	cases := []struct {
		name     string
		whl      string
		opts     InstallOptions
		want     error
		mentions string
	}{
		{"sha mismatch", mod(func(w *fixture.Wheel) {
			w.Record = bytes.Replace(goodRecord, []byte("sha256="+sha([]byte("__version__ = \"1.0\"\n"))), []byte("sha256="+sha([]byte("other"))), 1)
		}), InstallOptions{}, ErrRecordMismatch, "RECORD mismatch for bad/__init__.py: sha256 "},
		{"size mismatch", mod(func(w *fixture.Wheel) {
			w.Record = bytes.Replace(goodRecord, []byte(",20\n"), []byte(",21\n"), 1)
		}), InstallOptions{}, ErrRecordMismatch, "bad/__init__.py"},
		{"missing row", mod(func(w *fixture.Wheel) { w.OmitFromRecord = []string{"bad/__init__.py"} }),
			InstallOptions{}, ErrRecordMismatch, "bad/__init__.py: not listed in RECORD"},
		{"row without hash", mod(func(w *fixture.Wheel) {
			w.Files = file("bad/extra.py", 0)
			ms := w.Members()
			w.Record = append(fixture.Record(ms[:len(ms)-1], "bad-1.0.dist-info/RECORD", "bad/extra.py"), []byte("bad/extra.py,,\n")...)
		}), InstallOptions{}, ErrRecordMismatch, "bad/extra.py: RECORD has no hash"},
		{"extra row", mod(func(w *fixture.Wheel) {
			w.Record = append(goodRecord, []byte("bad/ghost.py,sha256="+sha(nil)+",0\n")...)
		}), InstallOptions{}, ErrRecordMismatch, "bad/ghost.py: listed in RECORD"},
		{"row twice", mod(func(w *fixture.Wheel) {
			w.Record = append(goodRecord, []byte("bad/__init__.py,sha256="+sha(nil)+",0\n")...)
		}), InstallOptions{}, ErrRecordMismatch, "bad/__init__.py: RECORD line"},
		{"md5 row", mod(func(w *fixture.Wheel) {
			w.Record = append(goodRecord, []byte("bad/__init__.py,md5=abc,0\n")...)
		}), InstallOptions{}, ErrRecordMismatch, "bad/__init__.py"},
		{"dotdot", mod(func(w *fixture.Wheel) { w.Files = file("../evil.py", 0) }), InstallOptions{}, ErrUnsafePath, `"../evil.py"`},
		{"inner dotdot", mod(func(w *fixture.Wheel) { w.Files = file("bad/../../evil.py", 0) }), InstallOptions{}, ErrUnsafePath, "evil.py"},
		{"absolute", mod(func(w *fixture.Wheel) { w.Files = file("/etc/evil", 0) }), InstallOptions{}, ErrUnsafePath, `"/etc/evil"`},
		{"backslash", mod(func(w *fixture.Wheel) { w.Files = file(`bad\..\..\evil.py`, 0) }), InstallOptions{}, ErrUnsafePath, "backslash"},
		{"nul", mod(func(w *fixture.Wheel) { w.Files = file("bad/a\x00b.py", 0) }), InstallOptions{}, ErrUnsafePath, "NUL"},
		{"empty component", mod(func(w *fixture.Wheel) { w.Files = file("bad//x.py", 0) }), InstallOptions{}, ErrUnsafePath, "bad//x.py"},
		{"symlink", mod(func(w *fixture.Wheel) { w.Files = file("bad/link", fs.ModeSymlink|0o777) }), InstallOptions{}, ErrUnsafePath, `"bad/link": symbolic link`},
		{"setuid", mod(func(w *fixture.Wheel) { w.Files = file("bad/suid", fs.ModeSetuid|0o755) }), InstallOptions{}, ErrUnsafePath, `"bad/suid": setuid`},
		{"setgid", mod(func(w *fixture.Wheel) { w.Files = file("bad/sgid", fs.ModeSetgid|0o755) }), InstallOptions{}, ErrUnsafePath, "bad/sgid"},
		{"sticky", mod(func(w *fixture.Wheel) { w.Files = file("bad/sticky", fs.ModeSticky|0o644) }), InstallOptions{}, ErrUnsafePath, "bad/sticky"},
		{"device", mod(func(w *fixture.Wheel) { w.Files = file("bad/dev", fs.ModeDevice|0o644) }), InstallOptions{}, ErrUnsafePath, "bad/dev"},
		{"fifo", mod(func(w *fixture.Wheel) { w.Files = file("bad/fifo", fs.ModeNamedPipe|0o644) }), InstallOptions{}, ErrUnsafePath, "bad/fifo"},
		{"duplicate member", mod(func(w *fixture.Wheel) {
			w.Files = []fixture.File{{Path: "bad/a.py", Data: []byte("1")}, {Path: "bad/a.py", Data: []byte("1")}}
		}), InstallOptions{}, ErrUnsafePath, `"bad/a.py" appears twice`},
		{"case duplicate", mod(func(w *fixture.Wheel) {
			w.Files = []fixture.File{{Path: "bad/A.py", Data: []byte("1")}, {Path: "bad/a.py", Data: []byte("1")}}
		}), InstallOptions{}, ErrUnsafePath, "bad/a.py"},
		{"data maps onto lib file", mod(func(w *fixture.Wheel) {
			w.Files = []fixture.File{{Path: "bad/a.py", Data: []byte("1")}, {Path: "bad-1.0.data/purelib/bad/A.py", Data: []byte("2")}}
		}), InstallOptions{}, ErrUnsafePath, "site-packages/bad/A.py"},
		{"file where a dir is needed", mod(func(w *fixture.Wheel) {
			w.Files = []fixture.File{{Path: "bad/x", Data: []byte("1")}, {Path: "bad-1.0.data/purelib/bad/x/y.py", Data: []byte("2")}}
		}), InstallOptions{}, ErrUnsafePath, "bad/x"},
		{"entry point over data script", mod(func(w *fixture.Wheel) {
			w.Files = []fixture.File{{Path: "bad/__init__.py", Data: nil}, {Path: "bad-1.0.data/scripts/Tool", Data: []byte("x")}}
			w.EntryPoints = "[console_scripts]\ntool = bad:main\n"
		}), InstallOptions{}, ErrUnsafePath, "bin/tool"},
		{"bomb per file", mod(func(w *fixture.Wheel) { w.Files = []fixture.File{{Path: "bad/zeros.bin", Data: bigZeros}} }),
			InstallOptions{MaxFileBytes: 1 << 20}, ErrTooLarge, "bad/zeros.bin"},
		{"bomb total", mod(func(w *fixture.Wheel) {
			w.Files = []fixture.File{{Path: "bad/z1.bin", Data: bigZeros}, {Path: "bad/z2.bin", Data: bigZeros}}
		}), InstallOptions{MaxTotalBytes: 6 << 20}, ErrTooLarge, "bad/z2.bin"},
		{"too many files", mod(func(w *fixture.Wheel) {}), InstallOptions{MaxFiles: 3}, ErrTooLarge, "members"},
		{"too many scripts", mod(func(w *fixture.Wheel) { w.EntryPoints = "[console_scripts]\na = bad:m\nb = bad:m\n" }),
			InstallOptions{MaxFiles: 5}, ErrTooLarge, "entry point"},
		{"malformed filename", func() string {
			p := mod(func(*fixture.Wheel) {})
			q := filepath.Join(filepath.Dir(p), "bad-1.0-py3-none.whl")
			must(t, os.Rename(p, q))
			return q
		}(), InstallOptions{}, ErrBadFilename, "bad-1.0-py3-none.whl"},
		{"dist-info name mismatch", func() string {
			p := mod(func(*fixture.Wheel) {})
			q := filepath.Join(filepath.Dir(p), "other-1.0-py3-none-any.whl")
			must(t, os.Rename(p, q))
			return q
		}(), InstallOptions{}, ErrBadWheel, "bad-1.0.dist-info"},
		{"dist-info version mismatch", func() string {
			p := mod(func(*fixture.Wheel) {})
			q := filepath.Join(filepath.Dir(p), "bad-2.0-py3-none-any.whl")
			must(t, os.Rename(p, q))
			return q
		}(), InstallOptions{}, ErrBadWheel, "bad-1.0.dist-info"},
		{"two dist-infos", mod(func(w *fixture.Wheel) { w.Files = file("other-1.0.dist-info/METADATA", 0) }), InstallOptions{}, ErrBadWheel, "other-1.0.dist-info"},
		{"unknown data dir", mod(func(w *fixture.Wheel) { w.Files = file("bad-1.0.data/bin/x", 0) }), InstallOptions{}, ErrBadWheel, `"bin"`},
		{"foreign data dir", mod(func(w *fixture.Wheel) { w.Files = file("other-1.0.data/purelib/x.py", 0) }), InstallOptions{}, ErrBadWheel, "other-1.0.data"},
		{"data without scheme path", mod(func(w *fixture.Wheel) { w.Files = file("bad-1.0.data/purelib", 0) }), InstallOptions{}, ErrBadWheel, "bad-1.0.data/purelib"},
		{"entry point without callable", mod(func(w *fixture.Wheel) { w.EntryPoints = "[console_scripts]\nx = bad\n" }), InstallOptions{}, ErrBadWheel, "entry point x"},
		{"entry point path name", mod(func(w *fixture.Wheel) { w.EntryPoints = "[console_scripts]\n../x = bad:main\n" }), InstallOptions{}, ErrBadWheel, `"../x"`},
		{"entry point dotdot", mod(func(w *fixture.Wheel) { w.EntryPoints = "[gui_scripts]\n.. = bad:main\n" }), InstallOptions{}, ErrBadWheel, `".."`},
		{"not a zip", func() string {
			p := filepath.Join(t.TempDir(), "bad-1.0-py3-none-any.whl")
			must(t, os.WriteFile(p, []byte("PK not really"), 0o644))
			return p
		}(), InstallOptions{}, ErrBadWheel, "zip"},
		{"metadata name mismatch", writeZip(t, "bad-1.0-py3-none-any.whl", renamedMetadata()), InstallOptions{}, ErrBadWheel, "METADATA says other"},
		{"wheel version 2", writeZip(t, "bad-1.0-py3-none-any.whl", wheelVersion2()), InstallOptions{}, ErrBadWheel, "Wheel-Version"},
	}
	for _, c := range cases {
		// Trusted bytes too: a wheel's members may then be inflated by libdeflate.
		for _, trusted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/trusted=%v", c.name, trusted), func(t *testing.T) {
				dest := filepath.Join(t.TempDir(), "tree")
				o := c.opts
				o.TrustedBytes = trusted
				_, err := Install(context.Background(), c.whl, dest, o)
				if !errors.Is(err, c.want) {
					t.Fatalf("err = %v, want %v", err, c.want)
				}
				if !strings.Contains(err.Error(), c.mentions) {
					t.Errorf("error %q does not mention %q", err, c.mentions)
				}
				assertNothingLeft(t, dest)
			})
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rebuild replaces members of w (by path) and recomputes RECORD.
func rebuild(w fixture.Wheel, replace map[string][]byte) []fixture.File {
	ms := w.Members()
	ms = ms[:len(ms)-1]
	for i := range ms {
		if d, ok := replace[ms[i].Path]; ok {
			ms[i].Data = d
		}
	}
	return append(ms, fixture.File{Path: w.DistInfo() + "/RECORD", Data: fixture.Record(ms, w.DistInfo()+"/RECORD")})
}

func renamedMetadata() []fixture.File {
	w := fixture.Wheel{Name: "bad", Version: "1.0"}
	return rebuild(w, map[string][]byte{"bad-1.0.dist-info/METADATA": []byte("Metadata-Version: 2.1\nName: other\nVersion: 1.0\n")})
}

func wheelVersion2() []fixture.File {
	w := fixture.Wheel{Name: "bad", Version: "1.0"}
	return rebuild(w, map[string][]byte{"bad-1.0.dist-info/WHEEL": []byte("Wheel-Version: 2.0\nRoot-Is-Purelib: true\n")})
}

func TestInstallDestination(t *testing.T) {
	whl := writeWheel(t, fixture.Wheel{Name: "d", Version: "1"})
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists")
	must(t, os.Mkdir(exists, 0o755))
	if _, err := Install(context.Background(), whl, exists, InstallOptions{}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("existing dest: err = %v, want ErrExist", err)
	}
	if _, err := Install(context.Background(), whl, filepath.Join(dir, "no/such/parent"), InstallOptions{}); err == nil {
		t.Error("missing parent: no error")
	}
	for _, o := range []InstallOptions{{ScriptShebang: "python"}, {ScriptShebang: "#!/x\n"}, {SitePackagesDir: "rel"}, {PythonVersion: "3"}, {MaxFiles: -1}} {
		dest := filepath.Join(dir, "opt")
		if _, err := Install(context.Background(), whl, dest, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
		assertNothingLeft(t, dest)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dest := filepath.Join(dir, "cancelled")
	if _, err := Install(ctx, whl, dest, InstallOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
	assertNothingLeft(t, dest)
}

func TestInstallLayout(t *testing.T) {
	var w fixture.Wheel
	for _, g := range goodWheels() {
		if g.Name == "my.Data_pkg" {
			w = g
		}
	}
	w.EntryPoints = "[console_scripts]\nmy-cli = my_data_pkg:main\n"
	whl := writeWheel(t, w)
	for _, requested := range []bool{false, true} {
		t.Run(fmt.Sprint("requested=", requested), func(t *testing.T) {
			dest, inst := installT(t, whl, InstallOptions{Requested: requested, ScriptShebang: "#!/custom/python"})
			tree := readTree(t, dest)
			want := map[string]fs.FileMode{
				"bin/binary": 0o755, "bin/nonl": 0o755, "bin/shell": 0o755, "bin/tool": 0o755, "bin/toolw": 0o755, "bin/my-cli": 0o755,
				"data/share/my-data/readme.txt":                               0o644,
				"include/my-Data-pkg/my_data.h":                               0o644,
				"include/my-Data-pkg/sub/inner.h":                             0o644,
				"site-packages/my_data_pkg/__init__.py":                       0o644,
				"site-packages/my_data_extra/__init__.py":                     0o644,
				"site-packages/my_Data_pkg-3.0rc1.dist-info/METADATA":         0o644,
				"site-packages/my_Data_pkg-3.0rc1.dist-info/WHEEL":            0o644,
				"site-packages/my_Data_pkg-3.0rc1.dist-info/INSTALLER":        0o644,
				"site-packages/my_Data_pkg-3.0rc1.dist-info/RECORD":           0o644,
				"site-packages/my_Data_pkg-3.0rc1.dist-info/entry_points.txt": 0o644,
			}
			if requested {
				want["site-packages/my_Data_pkg-3.0rc1.dist-info/REQUESTED"] = 0o644
			}
			if got, exp := strings.Join(keys(tree), " "), strings.Join(keys(want), " "); got != exp {
				t.Fatalf("files:\n%s\nwant:\n%s", got, exp)
			}
			for p, m := range want {
				if tree[p].mode.Perm() != m {
					t.Errorf("%s: mode %v, want %v", p, tree[p].mode, m)
				}
			}
			checks := map[string]string{
				"bin/tool":  "#!/custom/python\nprint('tool')\n",
				"bin/toolw": "#!/custom/python\nprint('w')\n",
				"bin/nonl":  "#!/custom/python\n",
				"bin/shell": "#!/bin/sh\necho sh\n",
				"site-packages/my_Data_pkg-3.0rc1.dist-info/INSTALLER": "pylayer\n",
			}
			for p, c := range checks {
				if string(tree[p].data) != c {
					t.Errorf("%s = %q, want %q", p, tree[p].data, c)
				}
			}
			rec := string(tree["site-packages/my_Data_pkg-3.0rc1.dist-info/RECORD"].data)
			for _, row := range []string{
				"../bin/tool,sha256=" + sha([]byte(checks["bin/tool"])) + ",31\r\n",
				"../include/my-Data-pkg/my_data.h,sha256=" + sha([]byte("int x;\n")) + ",7\r\n",
				"../data/share/my-data/readme.txt,",
				"my_Data_pkg-3.0rc1.dist-info/RECORD,,\r\n",
			} {
				if !strings.Contains(rec, row) {
					t.Errorf("RECORD lacks %q:\n%s", row, rec)
				}
			}
			if inst.Name != "my.Data_pkg" || inst.Version != "3.0rc1" || inst.DistInfo != "my_Data_pkg-3.0rc1.dist-info" || inst.Files != len(want) {
				t.Errorf("Installed = %+v", inst)
			}
			var total int64
			for _, f := range tree {
				total += int64(len(f.data))
			}
			if inst.Bytes != total {
				t.Errorf("Installed.Bytes = %d, want %d", inst.Bytes, total)
			}
			err := filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
				info, _ := d.Info()
				if !info.ModTime().Equal(time.Unix(0, 0)) {
					t.Errorf("%s: mtime %v", p, info.ModTime())
				}
				return err
			})
			must(t, err)
		})
	}
}

// TestInstallReproducible installs the same wheel twice and compares everything.
func TestInstallReproducible(t *testing.T) {
	for _, w := range goodWheels() {
		whl := writeWheel(t, w)
		a, _ := installT(t, whl, InstallOptions{})
		b, _ := installT(t, whl, InstallOptions{})
		ta, tb := readTree(t, a), readTree(t, b)
		if len(ta) != len(tb) {
			t.Fatalf("%s: %d vs %d files", w.Filename(), len(ta), len(tb))
		}
		for p, f := range ta {
			if g, ok := tb[p]; !ok || !bytes.Equal(f.data, g.data) || f.mode != g.mode {
				t.Errorf("%s: %s differs", w.Filename(), p)
			}
		}
	}
}
