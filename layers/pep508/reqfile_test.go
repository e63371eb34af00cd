package pep508

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestParseRequirementsFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"req.txt": "\ufeff# top comment\n" +
			"requests>=2.0  # trailing comment\n" +
			"\n" +
			"numpy \\\n" +
			"  <2 ; python_version < '3.12'\n" +
			"-r sub/more.txt\n" +
			"attrs#notacomment==1\r\n" +
			"   # indented comment \\\n" +
			"six\n",
		"sub/more.txt": "--requirement=../leaf.txt\nlxml==5.1.0",
		"leaf.txt":     "et_xmlfile\\",
	})
	got, err := ParseRequirementsFile(context.Background(), filepath.Join(dir, "req.txt"))
	if err == nil || !strings.Contains(err.Error(), "req.txt:7:") {
		t.Fatalf("want an error at req.txt:7 for attrs#notacomment, got %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "req.txt"), []byte(strings.Replace(
		mustRead(t, filepath.Join(dir, "req.txt")), "attrs#notacomment==1", "attrs==1 #c", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = ParseRequirementsFile(context.Background(), filepath.Join(dir, "req.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range got {
		rel, _ := filepath.Rel(dir, l.File)
		lines = append(lines, rel+":"+itoa(l.Line)+":"+l.Req.String())
	}
	want := []string{
		"req.txt:2:requests>=2.0",
		`req.txt:4:numpy<2; python_version < "3.12"`,
		"leaf.txt:1:et_xmlfile",
		"sub/more.txt:2:lxml==5.1.0",
		"req.txt:7:attrs==1",
		"req.txt:9:six",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestParseRequirementsFileErrors(t *testing.T) {
	tests := []struct {
		content string
		is      error
		substr  string
	}{
		{"a\n-e .\n", ErrUnsupportedLine, "r.txt:2: "},
		{"--index-url\n", ErrUnsupportedLine, "exactly one URL"},
		{"--find-links ./wheels\n", ErrUnsupportedLine, "--find-links"},
		{"a==1 --hash=md5:abc\n", ErrUnsupportedLine, "sha256 only"},
		{"a==1 --hash=sha256:" + strings.Repeat("z", 64) + "\n", ErrUnsupportedLine, "sha256 only"},
		{"a==1 --no-binary :all:\n", ErrUnsupportedLine, "only --hash is"},
		{"-c constraints.txt\n", ErrConstraintInFile, "--constraint/-c on the command line"},
		{"a==1 --hash=sha256:abc\n", ErrUnsupportedLine, "--hash"},
		{"a==1 --hash sha256:" + strings.Repeat("a", 64) + " b==2\n", ErrUnsupportedLine, "requirement text must come first"},
		{"./pkg\n", ErrUnsupportedLine, "path or URL"},
		{"https://e.com/a.whl\n", ErrUnsupportedLine, "path or URL"},
		{"a @ https://e.com/a.whl\n", ErrUnsupportedLine, "direct URL"},
		{"a==${VERSION}\n", ErrUnsupportedLine, "environment variables"},
		{"a>=\n", nil, "r.txt:1: "},
		{"-r self.txt\n", ErrIncludeCycle, "include each other"},
		{"-r missing.txt\n", os.ErrNotExist, "r.txt:1: "},
		{"-r\n", ErrUnsupportedLine, "exactly one file"},
		{"\xff\n", nil, "UTF-8"},
	}
	for _, tt := range tests {
		dir := writeFiles(t, map[string]string{"r.txt": tt.content, "self.txt": "-r ./r.txt\n"})
		_, err := ParseRequirementsFile(context.Background(), filepath.Join(dir, "r.txt"))
		if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.substr) {
			t.Errorf("%q: error %v; want %v mentioning %q", tt.content, err, tt.is, tt.substr)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := writeFiles(t, map[string]string{"r.txt": "a\n"})
	if _, err := ParseRequirementsFile(ctx, filepath.Join(dir, "r.txt")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// TestReadRequirementsFileHashesAndIndexes: hashed requirements as pip-compile
// --generate-hashes and pylayer export write them, and index lines.
func TestReadRequirementsFileHashesAndIndexes(t *testing.T) {
	h1, h2 := strings.Repeat("a", 64), strings.Repeat("B", 64)
	dir := writeFiles(t, map[string]string{"r.txt": "--index-url https://idx.example/simple\n" +
		"-i https://mirror.example/simple\n--extra-index-url=https://extra.example/simple\n" +
		"openpyxl==3.0.9 \\\n    --hash=sha256:" + h1 + " \\\n    --hash sha256:" + h2 + "\n" +
		"et-xmlfile==1.0.1 --hash=sha256:" + h1 + "  # pinned\nplain>=1\n"})
	rf, err := ReadRequirementsFile(context.Background(), filepath.Join(dir, "r.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if rf.IndexURL != "https://mirror.example/simple" || !strings.HasSuffix(rf.Where, "r.txt:2") {
		t.Errorf("index %q at %q: want the last one, -i, on line 2", rf.IndexURL, rf.Where)
	}
	if len(rf.ExtraIndexURLs) != 1 || rf.ExtraIndexURLs[0] != "https://extra.example/simple" {
		t.Errorf("extra indexes %q", rf.ExtraIndexURLs)
	}
	if len(rf.Lines) != 3 {
		t.Fatalf("%d lines: %+v", len(rf.Lines), rf.Lines)
	}
	want := [][]string{{h1, strings.ToLower(h2)}, {h1}, nil}
	for i, l := range rf.Lines {
		if strings.Join(l.Hashes, ",") != strings.Join(want[i], ",") {
			t.Errorf("line %d (%s): hashes %q, want %q", i, l.Req.Name, l.Hashes, want[i])
		}
	}
	if rf.Lines[0].Req.String() != "openpyxl==3.0.9" || rf.Lines[0].Line != 4 {
		t.Errorf("first requirement %q at line %d", rf.Lines[0].Req.String(), rf.Lines[0].Line)
	}
}
