package untar

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pylayer/pylayer/internal/gunzip"
	"github.com/pylayer/pylayer/oci"
)

// ent is one tar entry to write.
type ent struct {
	hdr  tar.Header
	body string
}

func reg(name, body string) ent {
	return ent{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body}
}
func exe(name, body string) ent { e := reg(name, body); e.hdr.Mode = 0o755; return e }
func dir(name string) ent {
	return ent{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}
func sym(name, target string) ent {
	return ent{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}
func hard(name, target string) ent {
	return ent{hdr: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: 0o644}}
}
func special(name string, typ byte) ent {
	return ent{hdr: tar.Header{Name: name, Typeflag: typ, Mode: 0o644, Devmajor: 1, Devminor: 3}}
}
func mode(e ent, m int64) ent { e.hdr.Mode = m; return e }
func pax(e ent, kv ...string) ent {
	e.hdr.Format = tar.FormatPAX
	e.hdr.PAXRecords = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		e.hdr.PAXRecords[kv[i]] = kv[i+1]
	}
	return e
}
func global(kv ...string) ent {
	e := pax(ent{hdr: tar.Header{Name: "pax_global_header", Typeflag: tar.TypeXGlobalHeader}}, kv...)
	return e
}

func rawTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatalf("writing %q: %v", e.hdr.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func lim() Limits { return DefaultLimits() }

func TestExtract(t *testing.T) {
	for _, ro := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReadOnly=%v", ro), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "root")
			raw := rawTar(t, reg("a/b/c", "x"), dir("a/"), exe("a/run", "#!"), dir("e/"), reg("long/"+strings.Repeat("n", 150), "pax path"), reg("ü/ß", "utf-8"))
			got, err := Extract(context.Background(), bytes.NewReader(gz(t, raw)), dst, Options{Limits: lim(), Gzip: true, ReadOnly: ro, Hash: sha256.New})
			if err != nil {
				t.Fatal(err)
			}
			file, exec := fs.FileMode(0o644), fs.FileMode(0o755)
			if ro {
				file, exec = 0o444, 0o555
			}
			want := []Entry{
				{Path: "a", Kind: Dir, Mode: fs.ModeDir | 0o755},
				{Path: "a/b", Kind: Dir, Mode: fs.ModeDir | 0o755},
				{Path: "a/b/c", Kind: File, Mode: file, Size: 1, Sum: sum("x")},
				{Path: "a/run", Kind: File, Mode: exec, Size: 2, Sum: sum("#!")},
				{Path: "e", Kind: Dir, Mode: fs.ModeDir | 0o755},
				{Path: "long", Kind: Dir, Mode: fs.ModeDir | 0o755},
				{Path: "long/" + strings.Repeat("n", 150), Kind: File, Mode: file, Size: 8, Sum: sum("pax path")},
				{Path: "ü", Kind: Dir, Mode: fs.ModeDir | 0o755},
				{Path: "ü/ß", Kind: File, Mode: file, Size: 5, Sum: sum("utf-8")},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("entries\n got %v\nwant %v", got, want)
			}
			for _, e := range want {
				fi, err := os.Lstat(filepath.Join(dst, e.Path))
				if err != nil || fi.Mode() != e.Mode {
					t.Errorf("%s on disk: %v, %v; want mode %v", e.Path, fi.Mode(), err, e.Mode)
				}
			}
			// The same tar, not gzip'd.
			dst2 := filepath.Join(t.TempDir(), "root")
			if got2, err := Extract(context.Background(), bytes.NewReader(raw), dst2, Options{Limits: lim(), ReadOnly: ro, Hash: sha256.New}); err != nil || fmt.Sprint(got2) != fmt.Sprint(want) {
				t.Errorf("plain tar: %v, %v", got2, err)
			}
			// Without a Hash, the same entries with no sums.
			dst3 := filepath.Join(t.TempDir(), "root")
			got3, err := Extract(context.Background(), bytes.NewReader(raw), dst3, Options{Limits: lim(), ReadOnly: ro})
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				want[i].Sum = nil
			}
			if fmt.Sprint(got3) != fmt.Sprint(want) {
				t.Errorf("without a hash\n got %v\nwant %v", got3, want)
			}
		})
	}
}

// TestExtractOptions: what each option admits is refused without it.
func TestExtractOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		opts Options
		want []string // paths and link targets, "path@target"
	}{
		{"symlinks", rawTar(t, dir("bin/"), exe("bin/python3.11", "ELF"), sym("bin/python3", "python3.11"), sym("lib", "bin")), Options{Symlinks: true}, []string{"bin", "bin/python3@python3.11", "bin/python3.11", "lib@bin"}},
		{"hardlinks", rawTar(t, reg("a", "1"), hard("b", "a")), Options{Hardlinks: true, Hash: sha256.New}, []string{"a", "b"}},
		{"global header", rawTar(t, global("comment", "made by a tool"), reg("a", "1")), Options{GlobalHeaders: true}, []string{"a"}},
		{"under", rawTar(t, dir("python/"), dir("python/bin/"), reg("python/bin/x", "1")), Options{Under: "python"}, []string{"bin", "bin/x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Limits = lim()
			dst := filepath.Join(t.TempDir(), "root")
			got, err := Extract(context.Background(), bytes.NewReader(tc.raw), dst, o)
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, e := range got {
				p := e.Path
				if e.Kind == Symlink {
					p += "@" + e.Link
				}
				paths = append(paths, p)
			}
			if strings.Join(paths, " ") != strings.Join(tc.want, " ") {
				t.Errorf("entries %v, want %v", paths, tc.want)
			}
			if tc.name == "hardlinks" {
				a, _ := os.Stat(filepath.Join(dst, "a"))
				b, _ := os.Stat(filepath.Join(dst, "b"))
				if !os.SameFile(a, b) || !bytes.Equal(got[1].Sum, sum("1")) || !bytes.Equal(got[0].Sum, sum("1")) || got[1].Kind != File {
					t.Errorf("b is not a hard link of a: %+v", got)
				}
			}
			if tc.opts.Under == "" { // without the option, the same archive is refused
				if _, err := Extract(context.Background(), bytes.NewReader(tc.raw), filepath.Join(t.TempDir(), "root"), Options{Limits: lim()}); !errors.Is(err, ErrUnsafe) {
					t.Errorf("without the option: %v, want ErrUnsafe", err)
				}
			}
		})
	}
}

func TestExtractRefuses(t *testing.T) {
	truncated := rawTar(t, reg("a", strings.Repeat("x", 5000)))[:512+100]
	links := Options{Symlinks: true, Hardlinks: true}
	under := Options{Under: "python", Symlinks: true, Hardlinks: true}
	tests := []struct {
		name  string
		raw   []byte
		opts  Options
		entry string // the entry the error names ("" for archive-level errors)
		msg   string
		large bool
	}{
		// Names.
		{"absolute", rawTar(t, reg("/etc/cron.d/x", "x")), Options{}, "/etc/cron.d/x", "absolute", false},
		{"dotdot", rawTar(t, reg("../x", "x")), Options{}, "../x", `".."`, false},
		{"deep dotdot", rawTar(t, reg("a/../../x", "x")), Options{}, "a/../../x", `".."`, false},
		{"dotdot inside", rawTar(t, reg("a/../x", "x")), Options{}, "a/../x", `".."`, false},
		{"dot component", rawTar(t, reg("a/./b", "x")), Options{}, "a/./b", "not clean", false},
		{"leading dot slash", rawTar(t, reg("./a", "x")), Options{}, "./a", "not clean", false},
		{"double slash", rawTar(t, reg("a//b", "x")), Options{}, "a//b", "not clean", false},
		{"dot entry", rawTar(t, dir("./")), Options{}, "./", `"."`, false},
		{"backslash", rawTar(t, reg(`a\..\b`, "x")), Options{}, `a\..\b`, "backslash", false},
		{"control character", rawTar(t, reg("a\nb", "x")), Options{}, "a\nb", "control", false},
		{"not UTF-8", rawTar(t, ent{tar.Header{Name: "a\xffb", Typeflag: tar.TypeReg, Format: tar.FormatGNU}, ""}), Options{}, "a\xffb", "UTF-8", false},
		{"reserved", rawTar(t, reg(".pylayer/manifest.json", "{}")), Options{Reserved: []string{".pylayer"}}, ".pylayer/manifest.json", "reserved", false},
		{"outside under", rawTar(t, reg("other/x", "x")), under, "other/x", "outside python/", false},
		{"under is a file", rawTar(t, reg("python", "x")), under, "python", "must be a directory", false},
		// Types.
		{"symlink", rawTar(t, sym("x", "y")), Options{}, "x", "symlink", false},
		{"hardlink", rawTar(t, reg("a", "1"), hard("b", "a")), Options{}, "b", "hardlink", false},
		{"char device", rawTar(t, special("null", tar.TypeChar)), links, "null", "device", false},
		{"block device", rawTar(t, special("sda", tar.TypeBlock)), links, "sda", "device", false},
		{"fifo", rawTar(t, special("pipe", tar.TypeFifo)), links, "pipe", "named pipe", false},
		{"other type", rawTar(t, special("c", tar.TypeCont)), links, "c", "entry type", false},
		// Links.
		{"absolute symlink", rawTar(t, sym("sh", "/bin/sh")), links, "sh", "absolute", false},
		{"escaping symlink", rawTar(t, dir("bin/"), sym("bin/up", "../../etc")), links, "bin/up", "leaves the tree", false},
		{"unclean symlink", rawTar(t, dir("bin/"), sym("bin/up", "python3/../..")), links, "bin/up", "not clean", false},
		{"write through symlink", rawTar(t, dir("bin/"), sym("lnk", "bin"), reg("lnk/x", "1")), links, "lnk/x", "not a directory", false},
		{"hardlink out", rawTar(t, hard("h", "/etc/passwd")), links, "h", "absolute", false},
		{"hardlink up", rawTar(t, hard("h", "../../etc/shadow")), links, "h", `".."`, false},
		{"hardlink to symlink", rawTar(t, reg("a", "1"), sym("s", "a"), hard("h", "s")), links, "h", "not a regular file", false},
		{"hardlink forward", rawTar(t, hard("h", "later"), reg("later", "1")), links, "h", "not a regular file", false},
		{"hardlink to a directory", rawTar(t, dir("d/"), hard("h", "d")), links, "h", "not a regular file", false},
		{"hardlink to under", rawTar(t, dir("python/"), hard("python/h", "python")), under, "python/h", "hardlink", false},
		// Modes.
		{"setuid", rawTar(t, mode(reg("su", "x"), 0o4755)), Options{}, "su", "setuid", false},
		{"setgid dir", rawTar(t, mode(dir("d/"), 0o2755)), Options{}, "d/", "setgid", false},
		{"sticky dir", rawTar(t, mode(dir("t/"), 0o1777)), Options{}, "t/", "sticky", false},
		// Duplicates.
		{"duplicate file", rawTar(t, reg("a", "1"), reg("a", "2")), Options{}, "a", "duplicate", false},
		{"duplicate directory", rawTar(t, dir("d/"), dir("d/")), Options{}, "d/", "duplicate", false},
		{"duplicate under", rawTar(t, dir("python/"), dir("python/")), under, "python/", "duplicate", false},
		{"file then directory", rawTar(t, reg("a", "1"), dir("a/")), Options{}, "a/", "duplicate", false},
		{"implied directory then file", rawTar(t, reg("a/b", "1"), reg("a", "2")), Options{}, "a", "replaces a directory", false},
		{"file under a file", rawTar(t, reg("a", "1"), reg("a/b", "2")), Options{}, "a/b", "not a directory", false},
		{"symlink over a directory", rawTar(t, reg("a/b", "1"), sym("a", "b")), links, "a", "replaces a directory", false},
		// PAX.
		{"global header", rawTar(t, global("comment", "x"), reg("a", "1")), Options{}, "pax_global_header", "global", false},
		{"vendor record", rawTar(t, pax(reg("a", "1"), "SCHILY.xattr.security.capability", "\x01")), Options{}, "a", "standard keys", false},
		{"vendor record in a global header", rawTar(t, global("LIBARCHIVE.creationtime", "1"), reg("a", "1")), Options{GlobalHeaders: true}, "pax_global_header", "standard keys", false},
		{"too many records", rawTar(t, pax(reg("a", "1"), manyComments(20)...)), Options{}, "a", "PAX records", false},
		{"huge record", rawTar(t, pax(reg("a", "1"), "comment", strings.Repeat("c", 20<<10))), Options{}, "a", "PAX records of", false},
		{"record not UTF-8", rawTar(t, pax(reg("a", "1"), "comment", "\xff")), Options{}, "a", "UTF-8", false},
		// Limits.
		{"too many entries", rawTar(t, reg("a", "1"), reg("b", "2"), reg("c", "3")), Options{Limits: Limits{MaxEntries: 2, MaxFileBytes: 10, MaxTotalBytes: 10}}, "c", "entries", true},
		{"file too large", rawTar(t, reg("a", strings.Repeat("x", 11))), Options{Limits: Limits{MaxEntries: 2, MaxFileBytes: 10, MaxTotalBytes: 100}}, "a", "per file", true},
		{"archive too large", rawTar(t, reg("a", strings.Repeat("x", 10)), reg("b", strings.Repeat("y", 10))), Options{Limits: Limits{MaxEntries: 9, MaxFileBytes: 10, MaxTotalBytes: 15}}, "b", "exceed", true},
		// Damage.
		{"truncated content", truncated, Options{}, "a", "", false},
		{"not tar", bytes.Repeat([]byte("garbage!"), 200), Options{}, "", "reading the tar", false},
		{"empty", rawTar(t), Options{}, "", "no entries", false},
		{"not gzip", []byte("this is not a gzip stream at all"), Options{Gzip: true}, "", "gzip", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			if o.Limits == (Limits{}) {
				o.Limits = lim()
			}
			o.What = "test archive"
			parent := t.TempDir()
			_, err := Extract(context.Background(), bytes.NewReader(tt.raw), filepath.Join(parent, "root"), o)
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want ErrUnsafe mentioning %q", err, tt.msg)
			}
			if w := map[bool]string{false: "unsafe test archive: ", true: "test archive too large: "}[tt.large]; !strings.HasPrefix(err.Error(), w) {
				t.Errorf("error does not begin %q: %v", w, err)
			}
			if tt.large != errors.Is(err, ErrTooLarge) {
				t.Errorf("errors.Is(err, ErrTooLarge) = %v, want %v", !tt.large, tt.large)
			}
			if tt.entry != "" && !strings.Contains(err.Error(), strconv.Quote(tt.entry)) {
				t.Errorf("error does not name the entry %q: %v", tt.entry, err)
			}
			if left, _ := os.ReadDir(parent); len(left) != 0 {
				t.Errorf("a refused archive left %v behind", left)
			}
		})
	}
}

func manyComments(n int) []string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("comment%d", i), "x") // not standard keys either way
	}
	kv[0] = "comment"
	return kv
}

// TestExtractCancelled: a done context stops the extraction with its own error,
// not ErrUnsafe, and leaves nothing.
func TestExtractCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	parent := t.TempDir()
	_, err := Extract(ctx, bytes.NewReader(gz(t, rawTar(t, reg("a", "1")))), filepath.Join(parent, "root"), Options{Limits: lim(), Gzip: true})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnsafe) {
		t.Errorf("err = %v, want context.Canceled only", err)
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("left %v behind", left)
	}
	// An existing destination is refused before anything is read.
	if _, err := Extract(context.Background(), bytes.NewReader(nil), parent, Options{Limits: lim()}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("existing destination: %v, want fs.ErrExist", err)
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"a", "a/b", "site-packages/x.py", "bin/a b", "ü/ß", ".hidden", "a..b", "..a", ".pylayer"} {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "/a", "a/", "a//b", "a/./b", "a/..", "a\x00b", `a\b`, "a\tb", "a\x7fb", "\xff"} {
		if err := CheckName(name); err == nil {
			t.Errorf("CheckName(%q) = nil, want an error", name)
		}
	}
}

// TestExtractZstd: a tar+zstd stream unpacks to what the same tar gzip'd does; a gzip
// stream said to be zstd, both codecs at once, and a frame asking for a window over
// oci.MaxZstdWindow (64 MiB) are refused, leaving nothing.
func TestExtractZstd(t *testing.T) {
	raw := rawTar(t, reg("a/b/c", "x"), dir("a/"), exe("a/run", "#!"), reg("ü/ß", "utf-8"))
	zs := func() []byte {
		var buf bytes.Buffer
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zw.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	base := t.TempDir()
	want, err := Extract(context.Background(), bytes.NewReader(gz(t, raw)), filepath.Join(base, "gzip"), Options{Limits: lim(), Gzip: true, Hash: sha256.New})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Extract(context.Background(), bytes.NewReader(zs()), filepath.Join(base, "zstd"), Options{Limits: lim(), Zstd: true, Hash: sha256.New})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("zstd unpacked\n%v\nwant (as gzip)\n%v", got, want)
	}
	for _, c := range []struct {
		name string
		data []byte
		opts Options
		want string
	}{
		{"gzip said to be zstd", gz(t, raw), Options{Limits: lim(), Zstd: true}, "magic number"},
		{"both codecs", zs(), Options{Limits: lim(), Zstd: true, Gzip: true}, "not both"},
		// A frame header asking for a 1 GiB window (descriptor 0xA0: 2^(10+20)), then an
		// empty last block.
		{"window too large", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa0, 0x01, 0x00, 0x00}, Options{Limits: lim(), Zstd: true}, "window"},
	} {
		dst := filepath.Join(base, strings.ReplaceAll(c.name, " ", "-"))
		_, err := Extract(context.Background(), bytes.NewReader(c.data), dst, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
		if _, serr := os.Lstat(dst); !os.IsNotExist(serr) {
			t.Errorf("%s: left %s behind (%v)", c.name, dst, serr)
		}
	}
}

// TestExtractBytes: an archive held in memory unpacks as the same stream does, and a
// bad one fails with the same error, whether or not it is inflated in one call.
func TestExtractBytes(t *testing.T) {
	raw := rawTar(t, reg("a/b/c", "x"), dir("a/"), exe("a/run", "#!"), reg("ü/ß", strings.Repeat("utf-8 ", 1000)))
	base := t.TempDir()
	n := 0
	var scratch []byte // reused, as the host cache reuses it
	both := func(data []byte, o Options) (stream, mem []Entry, serr, merr error) {
		n++
		stream, serr = Extract(context.Background(), bytes.NewReader(data), filepath.Join(base, fmt.Sprint("s", n)), o)
		mem, merr = ExtractBytes(context.Background(), data, filepath.Join(base, fmt.Sprint("m", n)), o, &scratch)
		return
	}
	o := Options{Limits: lim(), Gzip: true, Hash: sha256.New}
	good := gz(t, raw)
	// The streaming reader stops at the tar's end and never reads the gzip trailer
	// (the blob's digest vouches for its bytes); libdeflate checks it, so a bad
	// CRC-32 falls back to streaming, with the same result.
	badCRC := append([]byte(nil), good...)
	badCRC[len(badCRC)-8] ^= 1
	// Members: as oci writes a layer blob (GzipMember bytes of tar each), of 100 bytes,
	// and members the fast path declines half-way (one larger than GzipMember, one with a
	// bad CRC-32): from memory as streamed, whatever it read before is thrown away.
	split := func(b []byte, size int) []byte {
		var out []byte
		for i := 0; i < len(b); i += size {
			out = append(out, gz(t, b[i:min(i+size, len(b))])...)
		}
		return out
	}
	bigTar := rawTar(t, reg("big", string(sampleBytes(oci.GzipMember+1000))), reg("small", "x"))
	cut := len(bigTar) - 10 // the last member is small: NewMembers takes it on, and declines the second
	declined := append(append(gz(t, bigTar[:100]), gz(t, bigTar[100:cut])...), gz(t, bigTar[cut:])...)
	badMiddle := split(raw, 100)
	badMiddle[len(gz(t, raw[:100]))+40] ^= 1
	for name, data := range map[string][]byte{"gzip": good, "bad crc": badCRC, "tar": raw,
		"members": split(raw, 100), "layer blob": split(bigTar, oci.GzipMember), "a larger member": declined,
		"one large member": gz(t, bigTar)} {
		o := o
		o.Gzip = name != "tar"
		s, m, serr, merr := both(data, o)
		if serr != nil || merr != nil || !reflect.DeepEqual(s, m) {
			t.Errorf("%s: from memory %v (%v), streamed %v (%v)", name, m, merr, s, serr)
		}
	}
	small := lim()
	small.MaxTotalBytes = 100
	for name, c := range map[string]struct {
		data []byte
		o    Options
	}{
		"truncated":  {good[:len(good)/2], o},
		"bad member": {badMiddle, o},
		"not gzip":   {raw, o},
		"too large":  {good, Options{Limits: small, Gzip: true}},
		"two codecs": {good, Options{Limits: lim(), Gzip: true, Zstd: true}},
	} {
		_, _, serr, merr := both(c.data, c.o)
		if serr == nil || merr == nil || serr.Error() != merr.Error() ||
			errors.Is(serr, ErrTooLarge) != errors.Is(merr, ErrTooLarge) {
			t.Errorf("%s: from memory: %v; streamed: %v; want the same error", name, merr, serr)
		}
	}
	scratch = nil
	if _, err := ExtractBytes(context.Background(), split(bigTar, oci.GzipMember), filepath.Join(base, "blob"), o, &scratch); err != nil {
		t.Fatal(err)
	}
	if gunzip.Available && cap(scratch) != oci.GzipMember {
		t.Errorf("after a layer blob of %d bytes of tar: scratch of %d bytes, want one member's (%d)", len(bigTar), cap(scratch), oci.GzipMember)
	}
}

// sampleBytes is n bytes that compress as code does.
func sampleBytes(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "def f%d(x):\n    return x * %d\n", i, i%97)
	}
	return b.Bytes()[:n]
}
