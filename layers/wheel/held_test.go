package wheel

import (
	"bytes"
	"testing"
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
				dest, _ := installT(t, whl, InstallOptions{ScriptShebang: "#!/custom/python"})
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
