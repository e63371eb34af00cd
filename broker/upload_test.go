package broker_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
)

// multipartBody builds a body with one part per (field, filename, content) triple.
func multipartBody(t *testing.T, parts ...[3]string) (string, string) {
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

func TestUpload(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.MaxUpload = 1024 })
	reqs := "/v1/sessions/" + e.sesA + "/requests"
	const name = "demo_pkg-1.0-py3-none-any.whl"
	content := "PK\x03\x04 pretend zip"

	before := e.snapshot()
	for _, tc := range []struct {
		name  string
		parts [][3]string
		want  int
	}{
		{"path in name", [][3]string{{"wheel", "../../" + name, content}}, 400},
		{"backslash in name", [][3]string{{"wheel", `..\` + name, content}}, 400},
		{"not a wheel name", [][3]string{{"wheel", "demo.tar.gz", content}}, 400},
		{"sdist name", [][3]string{{"wheel", "demo-1.0.tar.gz", content}}, 400},
		{"wrong field", [][3]string{{"file", name, content}}, 400},
		{"not a zip", [][3]string{{"wheel", name, "hello"}}, 400},
		{"two parts", [][3]string{{"wheel", name, content}, {"wheel", name, content}}, 400},
		{"too large", [][3]string{{"wheel", name, "PK\x03\x04" + strings.Repeat("x", 2000)}}, 413},
		{"empty", nil, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := multipartBody(t, tc.parts...)
			code, _, b := e.do("POST", reqs, e.agentA, ct, body)
			if code != tc.want {
				t.Errorf("%d %s, want %d", code, b, tc.want)
			}
			e.unchanged(tc.name, before)
			left, _ := filepath.Glob(filepath.Join(e.dataDir, "uploads", "sha256", ".upload-*"))
			if len(left) != 0 {
				t.Errorf("temp files left: %v", left)
			}
		})
	}

	ct, body := multipartBody(t, [3]string{"wheel", name, content})
	var r broker.Request
	e.mustDo("POST", reqs, e.agentA, ct, body, http.StatusCreated, &r)
	sum := sha256.Sum256([]byte(content))
	hexsum := hex.EncodeToString(sum[:])
	if r.State != broker.StatePending || r.Upload != name || len(r.Packages) != 1 || r.Packages[0].SHA256 != hexsum {
		t.Errorf("upload request = %+v", r)
	}
	got, err := os.ReadFile(filepath.Join(e.dataDir, "uploads", "sha256", hexsum+".whl"))
	if err != nil || string(got) != content {
		t.Errorf("stored wheel: %q, %v", got, err)
	}
	// The same bytes again land on the same file.
	e.mustDo("POST", reqs, e.agentA, ct, body, http.StatusCreated, nil)
	files, _ := filepath.Glob(filepath.Join(e.dataDir, "uploads", "sha256", "*"))
	if len(files) != 1 {
		t.Errorf("uploads dir: %v", files)
	}
}

func TestUploadDisabled(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.DataDir = "" })
	ct, body := multipartBody(t, [3]string{"wheel", "a-1-py3-none-any.whl", "PK\x03\x04"})
	before := e.snapshot()
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, ct, body, http.StatusNotImplemented, nil)
	e.unchanged("disabled upload", before)
}
