package cache

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// FuzzUnpack feeds arbitrary bytes to the unpacker: it must never panic,
// never write outside its root, leave nothing behind on error and, on
// success, only read-only regular files and directories that match its records.
func FuzzUnpack(f *testing.F) {
	valid, _ := tarTree(f, map[string]string{"site-packages/a/__init__.py": "x", "bin/run*": "#!/bin/sh\n"})
	seeds := [][]byte{
		valid,
		rawTarGz(f, reg("a", "1"), dir("d/"), reg("d/e", "2")),
		rawTarGz(f, link("x", "/etc/passwd")),
		rawTarGz(f, reg("../escape", "x")),
		rawTarGz(f, reg("a", "1"), reg("a/b", "2")),
		rawTarGz(f, dir("a/"), reg("a", "2")),
		[]byte("not gzip"),
		nil,
	}
	for _, s := range seeds {
		f.Add(uint8(1), s)
	}
	// The same archives uncompressed, and zstd-compressed.
	for _, i := range []int{1, 3} {
		f.Add(uint8(0), gunzip(f, seeds[i]))
		f.Add(uint8(2), zstdOf(f, gunzip(f, seeds[i])))
	}
	f.Add(uint8(2), []byte("not zstd"))
	mediaTypes := []string{v1.MediaTypeImageLayer, v1.MediaTypeImageLayerGzip, v1.MediaTypeImageLayerZstd}

	base := f.TempDir()
	durable = false
	defer func() { durable = true }()
	f.Fuzz(func(t *testing.T, codec uint8, data []byte) {
		outer, err := os.MkdirTemp(base, "outer-")
		must(t, err)
		defer forceRemoveAll(outer)
		dst := filepath.Join(outer, "root")
		lim := Limits{MaxEntries: 1000, MaxFileBytes: 1 << 20, MaxTotalBytes: 4 << 20, MaxBlobBytes: 4 << 20}
		mt := mediaTypes[int(codec)%len(mediaTypes)]
		recs, err := unpack(context.Background(), bytes.NewReader(data), mt, dst, lim, false, nil)
		// A blob held in memory (as fetched blobs up to maxMemBlobBytes are) may be
		// inflated in one call (untar.ExtractBytes): the same tree, or, for the one
		// stream libdeflate reads and the streaming reader refuses (gunzip's doc),
		// a tree where the stream has none.
		mem := filepath.Join(outer, "mem")
		mrecs, merr := unpack(context.Background(), bytes.NewBuffer(data), mt, mem, lim, false, nil)
		if err == nil && (merr != nil || !reflect.DeepEqual(recs, mrecs)) {
			t.Fatalf("unpacked from memory: %v, %d records; streamed: %d records", merr, len(mrecs), len(recs))
		}
		if merr == nil {
			forceRemoveAll(mem)
		}
		left := names(t, outer)
		if err != nil {
			if len(left) != 0 {
				t.Fatalf("error %v left %v behind", err, left)
			}
			return
		}
		if len(left) != 1 || left[0] != "root" {
			t.Fatalf("wrote outside the root: %v", left)
		}
		must(t, sealDirs(dst, dirsOf(recs)))
		list, err := marshalFiles(digest.FromBytes(data), recs)
		must(t, err)
		if _, err := parseFiles(list, digest.FromBytes(data)); err != nil {
			t.Fatalf("the file list of a successful unpack does not parse: %v", err)
		}
		problems, err := verifyTree(dst, recs, false)
		must(t, err)
		if len(problems) != 0 {
			t.Fatalf("tree differs from its records: %q", problems)
		}
		filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			must(t, err)
			if !d.IsDir() && !d.Type().IsRegular() {
				t.Fatalf("%s is a %v", p, d.Type())
			}
			return nil
		})
	})
}

// FuzzParseFiles: the file list parser never panics, and what it accepts
// holds only clean, ordered paths with their parents.
func FuzzParseFiles(f *testing.F) {
	blob := digest.FromString("blob")
	good, _ := marshalFiles(blob, []record{
		{Path: "a", Dir: true, Mode: modeDir},
		{Path: "a/b", Mode: modeFile, Size: 1, XXH64: digest.FromString("x").Encoded()[:16]},
	})
	f.Add(good)
	f.Add([]byte(`{"version":1,"blob":"` + string(blob) + `","entries":[{"path":"a","mode":292,"size":1,"sha256":"` + digest.FromString("x").Encoded() + `"}]}`))
	f.Add([]byte(`{"version":1,"blob":"` + string(blob) + `","entries":[{"path":"../x","mode":292}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := parseFiles(b, blob)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for i, r := range recs {
			if checkName(r.Path) != nil || i > 0 && recs[i-1].Path >= r.Path {
				t.Fatalf("accepted entry %q", r.Path)
			}
			if d := filepath.Dir(r.Path); d != "." && !seen[d] {
				t.Fatalf("accepted %q without its parent", r.Path)
			}
			if r.Dir {
				seen[r.Path] = true
			}
		}
	})
}

// FuzzRefName: escaping is reversible and always a single safe file name.
func FuzzRefName(f *testing.F) {
	for _, s := range []string{"current", "127.0.0.1:5000/a/b:c", "..", ".", "%", "a/../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		file, err := escapeRef(name)
		if err != nil {
			return
		}
		if file == "." || file == ".." || len(file) > 255 || bytes.ContainsAny([]byte(file), "/\x00") || file[0] == '.' {
			t.Fatalf("escapeRef(%q) = %q", name, file)
		}
		if back, ok := unescapeRef(file); !ok || back != name {
			t.Fatalf("unescapeRef(%q) = %q, %v; want %q", file, back, ok, name)
		}
	})
}

// zstdOf is raw zstd-compressed, as a tar+zstd layer blob.
func zstdOf(tb testing.TB, raw []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	must(tb, err)
	_, err = zw.Write(raw)
	must(tb, err)
	must(tb, zw.Close())
	return buf.Bytes()
}
