package wheel

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBuiltAt: the newest member's time, whatever the order; an MS-DOS time is read as
// UTC; a file that is not a zip is ErrBadWheel.
func TestBuiltAt(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range []time.Time{
		time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
		time.Date(2025, 3, 9, 8, 7, 6, 0, time.UTC),
		time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "p/" + m.Format("2006") + ".py", Modified: m})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "p-1.0-py3-none-any.whl")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := BuiltAt(p)
	if want := time.Date(2025, 3, 9, 8, 7, 6, 0, time.UTC); err != nil || !got.Equal(want) {
		t.Errorf("BuiltAt = %v, %v; want %v", got, err, want)
	}
	bad := filepath.Join(t.TempDir(), "q-1.0-py3-none-any.whl")
	os.WriteFile(bad, []byte("not a zip"), 0o644)
	if _, err := BuiltAt(bad); err == nil {
		t.Error("BuiltAt of a non-zip: no error")
	}
}
