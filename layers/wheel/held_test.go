package wheel

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pylayer/pylayer/internal/gunzip"
	"github.com/pylayer/pylayer/test/fixture"
)

// withHold runs f with at most n bytes of each wheel held between verifying and writing.
func withHold(t *testing.T, n int64, f func()) {
	t.Helper()
	old := holdBytes
	holdBytes = n
	defer func() { holdBytes = old }()
	f()
}

// TestInstallHeldAsStreamed: a member written from the bytes scan verified is the file
// and RECORD row a member inflated again gives, whether all, some or none are held.
func TestInstallHeldAsStreamed(t *testing.T) {
	for _, w := range goodWheels() {
		w.EntryPoints = "[console_scripts]\nmy-cli = x:main\n"
		whl := writeWheel(t, w)
		var streamed map[string]treeFile
		withHold(t, 0, func() {
			dest, _ := installT(t, whl, InstallOptions{ScriptShebang: "#!/custom/python"})
			streamed = readTree(t, dest)
		})
		for _, hold := range []int64{holdBytes, 600} {
			withHold(t, hold, func() {
				dest, _ := installT(t, whl, InstallOptions{ScriptShebang: "#!/custom/python", TrustedBytes: true})
				held := readTree(t, dest)
				if len(held) != len(streamed) {
					t.Fatalf("%s, hold %d: %d files, streamed %d", w.Filename(), hold, len(held), len(streamed))
				}
				for p, f := range streamed {
					if g, ok := held[p]; !ok || !bytes.Equal(f.data, g.data) || f.mode != g.mode {
						t.Errorf("%s, hold %d: %s differs from the streamed install", w.Filename(), hold, p)
					}
				}
			})
		}
	}
}

// TestInstallRejectsStreamed: every bad wheel is refused with no member held, too.
func TestInstallRejectsStreamed(t *testing.T) {
	withHold(t, 0, func() { TestInstallRejects(t) })
}

// rezip copies the wheel at whl member by member, raw (compressed bytes as they are),
// through edit, which may change a member's header or compressed bytes, into a new file.
func rezip(t *testing.T, whl string, edit func(h *zip.FileHeader, raw []byte) []byte) string {
	t.Helper()
	zr, err := zip.OpenReader(whl)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		r, err := f.OpenRaw()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		h := f.FileHeader
		raw = edit(&h, raw)
		h.CompressedSize64 = uint64(len(raw))
		w, err := zw.CreateRaw(&h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(whl))
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInflateHeldOnlyTrusted: libdeflate reads the members of a trusted wheel only (where
// pylayer has it); an untrusted one's, an agent's upload, meet Go's inflater alone.
func TestInflateHeldOnlyTrusted(t *testing.T) {
	w := fixture.Wheel{Name: "held", Version: "1.0", Files: []fixture.File{{Path: "held/__init__.py", Data: bytes.Repeat([]byte("x = 1\n"), 500)}}}
	whl := writeWheel(t, w)
	for _, trusted := range []bool{false, true} {
		before := inflatedHeld.Load()
		installT(t, whl, InstallOptions{TrustedBytes: trusted})
		n := inflatedHeld.Load() - before
		if want := trusted && gunzip.Available; want != (n > 0) {
			t.Errorf("trusted %v: libdeflate inflated %d members, libdeflate available %v", trusted, n, gunzip.Available)
		}
	}
}

// heldAndStreamed installs whl, trusted, with its members held (inflated by libdeflate
// where pylayer has it), then streamed, and returns the two outcomes ("<nil>" or the
// error's text).
func heldAndStreamed(t *testing.T, whl string) []string {
	t.Helper()
	var errs []string
	for _, hold := range []int64{holdBytes, 0} {
		withHold(t, hold, func() {
			_, err := Install(context.Background(), whl, filepath.Join(t.TempDir(), "tree"), InstallOptions{TrustedBytes: true})
			errs = append(errs, fmt.Sprint(err))
		})
	}
	return errs
}

// TestInflateHeld: a held deflate member is inflated in one call where pylayer has
// libdeflate (never without), to the bytes archive/zip gives; a member whose CRC-32,
// size or stream is not what the archive says is declined, and the install refuses it
// with the error the streamed reading gives, held or not.
func TestInflateHeld(t *testing.T) {
	data := bytes.Repeat([]byte("import os\nprint(os.getcwd())\n"), 300)
	w := fixture.Wheel{Name: "held", Version: "1.0", Files: []fixture.File{{Path: "held/__init__.py", Data: data}}}
	whl := writeWheel(t, w)
	file, err := os.Open(whl)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(file, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	var descOff int64 = -1 // where the member's data descriptor's CRC-32 is, if it has one
	for _, f := range zr.File {
		if f.Name != "held/__init__.py" {
			continue
		}
		if f.Method != zip.Deflate {
			t.Fatalf("%s is stored, not deflated: the test needs a deflated member", f.Name)
		}
		got := inflateHeld(file, f, int64(len(data)), &raw)
		if gunzip.Available != (got != nil) {
			t.Fatalf("inflateHeld gave %d bytes, with libdeflate available %v", len(got), gunzip.Available)
		}
		if got != nil && !bytes.Equal(got, data) {
			t.Fatal("inflateHeld's bytes differ from the member's")
		}
		for _, size := range []int64{int64(len(data)) - 1, int64(len(data)) + 1} {
			if b := inflateHeld(file, f, size, &raw); b != nil {
				t.Errorf("inflateHeld with size %d (the member has %d) gave %d bytes, want it declined", size, len(data), len(b))
			}
		}
		if f.Flags&0x8 != 0 {
			off, err := f.DataOffset()
			if err != nil {
				t.Fatal(err)
			}
			descOff = off + int64(f.CompressedSize64)
			var sig [4]byte
			if _, err := file.ReadAt(sig[:], descOff); err != nil {
				t.Fatal(err)
			}
			if sig == [4]byte{0x50, 0x4b, 0x07, 0x08} {
				descOff += 4
			}
		}
	}
	if descOff >= 0 { // a descriptor whose CRC-32 is not the central directory's
		b, err := os.ReadFile(whl)
		if err != nil {
			t.Fatal(err)
		}
		b[descOff] ^= 1
		bad := filepath.Join(t.TempDir(), filepath.Base(whl))
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		errs := heldAndStreamed(t, bad)
		if errs[0] == "<nil>" || errs[0] != errs[1] {
			t.Errorf("descriptor: held %q, streamed %q, want the same refusal", errs[0], errs[1])
		}
	}
	member := func(h *zip.FileHeader) bool { return h.Name == "held/__init__.py" }
	for _, tc := range []struct {
		name string
		edit func(h *zip.FileHeader, raw []byte) []byte
	}{
		{"crc", func(h *zip.FileHeader, raw []byte) []byte {
			if member(h) {
				h.CRC32 ^= 1
			}
			return raw
		}},
		{"stream", func(h *zip.FileHeader, raw []byte) []byte {
			if member(h) {
				raw = append([]byte(nil), raw...)
				raw[len(raw)/2] ^= 0x55
			}
			return raw
		}},
		{"truncated", func(h *zip.FileHeader, raw []byte) []byte {
			if member(h) {
				raw = raw[:len(raw)-3]
			}
			return raw
		}},
		{"trailing", func(h *zip.FileHeader, raw []byte) []byte {
			if member(h) {
				raw = append(append([]byte(nil), raw...), 0, 0, 0)
			}
			return raw
		}},
	} {
		bad := rezip(t, whl, tc.edit)
		errs := heldAndStreamed(t, bad)
		if tc.name == "trailing" { // archive/zip reads the stream to its end and ignores the rest
			if errs[0] != "<nil>" || errs[1] != "<nil>" {
				t.Errorf("%s: held %q, streamed %q, want both installed", tc.name, errs[0], errs[1])
			}
			continue
		}
		if errs[0] == "<nil>" || errs[0] != errs[1] {
			t.Errorf("%s: held %q, streamed %q, want the same refusal", tc.name, errs[0], errs[1])
		}
	}
}
