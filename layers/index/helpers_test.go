package index

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wheelSpec describes a small but valid wheel for tests.
type wheelSpec struct {
	name, version  string // distribution name as in the file name (e.g. "demo_pkg")
	requiresPython string
}

func (w wheelSpec) filename() string {
	return fmt.Sprintf("%s-%s-py3-none-any.whl", w.name, w.version)
}

func (w wheelSpec) metadata() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "Metadata-Version: 2.1\nName: %s\nVersion: %s\n", w.name, w.version)
	if w.requiresPython != "" {
		fmt.Fprintf(&b, "Requires-Python: %s\n", w.requiresPython)
	}
	b.WriteString("\nA test package.\n")
	return []byte(b.String())
}

// bytes builds the wheel: a module, METADATA, WHEEL and RECORD.
func (w wheelSpec) bytes(t testing.TB) []byte {
	t.Helper()
	di := fmt.Sprintf("%s-%s.dist-info", w.name, w.version)
	files := []struct {
		name string
		data []byte
	}{
		{w.name + "/__init__.py", []byte("VERSION = " + fmt.Sprintf("%q", w.version) + "\n")},
		{di + "/METADATA", w.metadata()},
		{di + "/WHEEL", []byte("Wheel-Version: 1.0\nGenerator: pylayer-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		fw, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(f.data)
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, b64url(sum[:]), len(f.data))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", di)
	fw, err := zw.Create(di + "/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func b64url(b []byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var out strings.Builder
	for i := 0; i < len(b); i += 3 {
		var n uint32
		k := 0
		for ; k < 3 && i+k < len(b); k++ {
			n |= uint32(b[i+k]) << (16 - 8*k)
		}
		for j := 0; j <= k; j++ {
			out.WriteByte(alphabet[(n>>(18-6*j))&63])
		}
	}
	return out.String()
}

// writeWheel writes the wheel into dir and returns its bytes.
func writeWheel(t testing.TB, dir string, w wheelSpec) []byte {
	t.Helper()
	b := w.bytes(t)
	if err := os.WriteFile(filepath.Join(dir, w.filename()), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
