package broker_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/test/fixture"
)

// multipartBody builds a body with one part per (field, filename, content) triple.
func multipartBody(t testing.TB, parts ...[3]string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		// Written by hand: CreateFormFile would escape, and we test raw names.
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p[0], p[1]))
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(p[2]))
	}
	mw.Close()
	return mw.FormDataContentType(), b.String()
}

// wheelBytes is a real wheel of name and version, with members changed by edit.
func wheelBytes(t testing.TB, name, version string, edit func([]fixture.File) []fixture.File) string {
	t.Helper()
	w := fixture.Wheel{Name: name, Version: version}
	m := w.Members()
	if edit != nil {
		m = edit(m)
	}
	b, err := fixture.Zip(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// upload posts one wheel to session as token and returns the status and body.
func (e *env) upload(token, session, name, content string) (int, []byte) {
	e.t.Helper()
	ct, body := multipartBody(e.t, [3]string{"wheel", name, content})
	code, _, b := e.do("POST", "/v1/sessions/"+session+"/requests", token, ct, body)
	return code, b
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestUpload(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.MaxUpload = 4096 })
	reqs := "/v1/sessions/" + e.sesA + "/requests"
	const name = "demo_pkg-1.0-py3-none-any.whl"
	content := wheelBytes(t, "demo-pkg", "1.0", nil)
	drop := func(part string) func([]fixture.File) []fixture.File {
		return func(m []fixture.File) []fixture.File {
			return slices.DeleteFunc(m, func(f fixture.File) bool { return strings.Contains(f.Path, part) })
		}
	}
	add := func(p string) func([]fixture.File) []fixture.File {
		return func(m []fixture.File) []fixture.File { return append(m, fixture.File{Path: p, Data: []byte("x")}) }
	}

	before := e.snapshot()
	for _, tc := range []struct {
		name  string
		parts [][3]string
		want  int
		says  string
	}{
		{"path in name", [][3]string{{"wheel", "../../" + name, content}}, 400, "path separator"},
		{"backslash in name", [][3]string{{"wheel", `..\` + name, content}}, 400, "path separator"},
		{"not a wheel name", [][3]string{{"wheel", "demo.tar.gz", content}}, 400, ""},
		{"sdist name", [][3]string{{"wheel", "demo-1.0.tar.gz", content}}, 400, ""},
		{"wrong field", [][3]string{{"file", name, content}}, 400, "field"},
		{"not a zip", [][3]string{{"wheel", name, "hello"}}, 400, "not a zip"},
		{"zip header, no zip", [][3]string{{"wheel", name, "PK\x03\x04 pretend zip"}}, 400, "not a zip"},
		{"no dist-info", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", drop(".dist-info/"))}}, 400, "dist-info"},
		{"no METADATA", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", drop("/METADATA"))}}, 400, "METADATA"},
		{"no WHEEL", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", drop("/WHEEL"))}}, 400, "WHEEL"},
		{"another project", [][3]string{{"wheel", name, wheelBytes(t, "other", "1.0", nil)}}, 400, "another project"},
		{"another version", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "2.0", nil)}}, 400, "another project or version"},
		{"two dist-infos", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", add("x-1.dist-info/METADATA"))}}, 400, "dist-info"},
		{"member out of the root", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", add("../evil.py"))}}, 400, "evil.py"},
		{"absolute member", [][3]string{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", add("/etc/evil"))}}, 400, "absolute"},
		{"two parts", [][3]string{{"wheel", name, content}, {"wheel", name, content}}, 400, "more than one part"},
		{"too large", [][3]string{{"wheel", name, "PK\x03\x04" + strings.Repeat("x", 5000)}}, 413, "larger than"},
		{"empty", nil, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := multipartBody(t, tc.parts...)
			code, _, b := e.do("POST", reqs, e.agentA, ct, body)
			if code != tc.want || !strings.Contains(string(b), tc.says) {
				t.Errorf("%d %s, want %d saying %q", code, b, tc.want, tc.says)
			}
			e.unchanged(tc.name, before) // no request, no file, no temporary file left
		})
	}

	code, b := e.upload(e.agentA, e.sesA, name, content)
	var r broker.Request
	if code != http.StatusCreated || json.Unmarshal(b, &r) != nil || r.State != broker.StatePending || r.Upload != name || r.Packages[0].SHA256 != sha(content) {
		t.Fatalf("upload: %d %s", code, b)
	}
	stored := filepath.Join("uploads", e.sesA, sha(content), name)
	if got, err := os.ReadFile(filepath.Join(e.dataDir, stored)); err != nil || string(got) != content {
		t.Errorf("stored wheel: %d bytes, %v", len(got), err)
	}
	// The same bytes again are the same one file.
	if code, b := e.upload(e.agentA, e.sesA, name, content); code != http.StatusCreated {
		t.Fatalf("second upload: %d %s", code, b)
	}
	if got := e.uploads(); !slices.Equal(got, []string{stored}) {
		t.Errorf("data dir holds %v, want only %s", got, stored)
	}
}

func TestUploadDisabled(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.DataDir = "" })
	ct, body := multipartBody(t, [3]string{"wheel", "a-1-py3-none-any.whl", "PK\x03\x04"})
	before := e.snapshot()
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, ct, body, http.StatusNotImplemented, nil)
	e.unchanged("disabled upload", before)
}
