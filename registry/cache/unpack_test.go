package cache

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

func TestUnsafeArchives(t *testing.T) {
	withMode := func(e entry, mode int64) entry { e.hdr.Mode = mode; return e }
	special := func(name string, typ byte) entry {
		return entry{hdr: tar.Header{Name: name, Typeflag: typ, Mode: 0o644, Devmajor: 1, Devminor: 3}}
	}
	gnu := func(e entry) entry { e.hdr.Format = tar.FormatGNU; return e }
	truncated := rawTarGz(t, reg("a", strings.Repeat("x", 5000)))
	{ // cut the tar inside the file's content, keep a valid gzip stream
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		must(t, tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5000}))
		tw.Write([]byte(strings.Repeat("x", 100)))
		truncated = gzipBytes(t, raw.Bytes()[:512+100])
	}
	tests := []struct {
		name  string
		blob  []byte
		entry string // the entry the error must name ("" for archive-level errors)
		lim   Limits
		large bool
	}{
		{"symlink", rawTarGz(t, dir("site-packages/"), link("site-packages/x", "/etc/passwd")), "site-packages/x", Limits{}, false},
		{"relative symlink", rawTarGz(t, link("x", "y")), "x", Limits{}, false},
		{"internal hardlink", rawTarGz(t, reg("a", "1"), hardlink("b", "a")), "b", Limits{}, false},
		{"hardlink out", rawTarGz(t, hardlink("b", "../../etc/shadow")), "b", Limits{}, false},
		{"char device", rawTarGz(t, special("null", tar.TypeChar)), "null", Limits{}, false},
		{"block device", rawTarGz(t, special("sda", tar.TypeBlock)), "sda", Limits{}, false},
		{"fifo", rawTarGz(t, special("pipe", tar.TypeFifo)), "pipe", Limits{}, false},
		{"setuid file", rawTarGz(t, withMode(reg("bin/su", "x"), 0o4755)), "bin/su", Limits{}, false},
		{"setgid dir", rawTarGz(t, withMode(dir("d/"), 0o2755)), "d/", Limits{}, false},
		{"sticky dir", rawTarGz(t, withMode(dir("t/"), 0o1777)), "t/", Limits{}, false},
		{"absolute path", rawTarGz(t, reg("/etc/cron.d/x", "x")), "/etc/cron.d/x", Limits{}, false},
		{"parent reference", rawTarGz(t, reg("../x", "x")), "../x", Limits{}, false},
		{"deep parent reference", rawTarGz(t, reg("a/../../x", "x")), "a/../../x", Limits{}, false},
		{"parent reference that stays inside", rawTarGz(t, reg("a/../x", "x")), "a/../x", Limits{}, false},
		{"dot component", rawTarGz(t, reg("a/./b", "x")), "a/./b", Limits{}, false},
		{"leading dot slash", rawTarGz(t, reg("./a", "x")), "./a", Limits{}, false},
		{"double slash", rawTarGz(t, reg("a//b", "x")), "a//b", Limits{}, false},
		{"dot entry", rawTarGz(t, dir("./")), "./", Limits{}, false},
		{"file with trailing slash", patchName(t, rawTarGz(t, reg("aX", "x")), "aX", "a/"), "a/", Limits{}, false},
		{"backslash", rawTarGz(t, reg(`a\..\b`, "x")), `a\..\b`, Limits{}, false},
		{"control character", rawTarGz(t, reg("a\nb", "x")), "a\nb", Limits{}, false},
		{"not UTF-8", rawTarGz(t, gnu(reg("a\xffb", "x"))), "a\xffb", Limits{}, false},
		{"reserved metadata dir", rawTarGz(t, reg(".pylayer/manifest.json", "{}")), ".pylayer/manifest.json", Limits{}, false},
		{"duplicate file", rawTarGz(t, reg("a", "1"), reg("a", "2")), "a", Limits{}, false},
		{"duplicate directory", rawTarGz(t, dir("d/"), dir("d/")), "d/", Limits{}, false},
		{"file then directory", rawTarGz(t, reg("a", "1"), dir("a/")), "a/", Limits{}, false},
		{"directory then file", rawTarGz(t, reg("a/b", "1"), reg("a", "2")), "a", Limits{}, false},
		{"file under a file", rawTarGz(t, reg("a", "1"), reg("a/b", "2")), "a/b", Limits{}, false},
		{"global pax header", rawTarGz(t, entry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "x"}}}, reg("a", "1")), "", Limits{}, false},
		{"too many entries", rawTarGz(t, reg("a", "1"), reg("b", "2"), reg("c", "3")), "c", Limits{MaxEntries: 2}, true},
		{"file too large", rawTarGz(t, reg("a", strings.Repeat("x", 11))), "a", Limits{MaxFileBytes: 10}, true},
		{"archive too large", rawTarGz(t, reg("a", strings.Repeat("x", 10)), reg("b", strings.Repeat("y", 10))), "b", Limits{MaxTotalBytes: 15}, true},
		{"truncated content", truncated, "a", Limits{}, false},
		{"not gzip", []byte("this is not a gzip stream at all"), "", Limits{}, false},
		{"not tar", gzipBytes(t, bytes.Repeat([]byte("garbage!"), 200)), "", Limits{}, false},
		{"empty archive", rawTarGz(t), "", Limits{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := openCache(t, WithLimits(tt.lim))
			s := newStore()
			blobs, lbs := blobOf(t, "evil-1.0-py3-none-any.whl", tt.blob)
			fx := s.add(rawArtifact(t, "k", blobs, lbs))
			_, err := c.Install(context.Background(), fx.md, fx.manifest, s.fetch, nil)
			if !errors.Is(err, ErrUnsafeArchive) {
				t.Fatalf("err = %v, want ErrUnsafeArchive", err)
			}
			if tt.large != errors.Is(err, ErrTooLarge) {
				t.Errorf("errors.Is(err, ErrTooLarge) = %v, want %v: %v", !tt.large, tt.large, err)
			}
			if tt.entry != "" && !strings.Contains(err.Error(), strconv.Quote(tt.entry)) {
				t.Errorf("error does not name the entry %q: %v", tt.entry, err)
			}
			if !strings.Contains(err.Error(), "layer archive") {
				t.Errorf("error does not say it is a layer archive: %v", err)
			}
			if !strings.Contains(err.Error(), "evil-1.0-py3-none-any.whl") {
				t.Errorf("error does not name the wheel: %v", err)
			}
			assertNothingLeft(t, c)
		})
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"a", "a/b", "site-packages/x.py", "bin/a b", "ü/ß", ".hidden", "a..b", "..a"} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "/a", "a/", "a//b", "a/./b", "a/..", "a\x00b", `a\b`, "a\tb", "a\x7fb", "\xff", ".pylayer", ".pylayer/x"} {
		if err := checkName(name); err == nil {
			t.Errorf("checkName(%q) = nil, want an error", name)
		}
	}
}

// TestUnpackLimitsActualBytes: the per-file limit holds even when a header
// lies about the size (the reader yields exactly hdr.Size bytes, and the
// copy reads at most limit+1).
func TestUnpackAcceptsImpliedDirectories(t *testing.T) {
	dst := t.TempDir() + "/root"
	recs, err := unpack(context.Background(), bytes.NewReader(rawTarGz(t, reg("a/b/c", "x"), dir("a/"), withExec(reg("a/run", "y")))), v1.MediaTypeImageLayerGzip, dst, DefaultLimits(), false, nil)
	must(t, err)
	var got []string
	for _, r := range recs {
		got = append(got, r.Path+":"+strconv.FormatUint(uint64(r.Mode), 8))
	}
	want := "a:555 a/b:555 a/b/c:444 a/run:555"
	if strings.Join(got, " ") != want {
		t.Errorf("records = %v, want %v", got, want)
	}
}

func withExec(e entry) entry { e.hdr.Mode = 0o755; return e }

func gzipBytes(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzipWriter(&buf)
	zw.Write(b)
	must(t, zw.Close())
	return buf.Bytes()
}

// patchName renames the first entry of a tar.gz behind archive/tar's back
// (it refuses some names an attacker can still write), fixing the checksum.
func patchName(t testing.TB, tgz []byte, old, new string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	must(t, err)
	raw, err := io.ReadAll(zr)
	must(t, err)
	if len(old) != len(new) || string(raw[:len(old)]) != old {
		t.Fatalf("patchName: first entry is not %q", old)
	}
	copy(raw, new)
	copy(raw[148:156], "        ")
	sum := 0
	for _, b := range raw[:512] {
		sum += int(b)
	}
	copy(raw[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return gzipBytes(t, raw)
}

func link(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: 0o644}}
}

func gunzip(t testing.TB, b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	must(t, err)
	out, err := io.ReadAll(zr)
	must(t, err)
	return out
}
