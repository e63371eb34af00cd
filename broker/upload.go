package broker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/pylayer/pylayer/layers/wheel"
)

// UploadField is the multipart form field that carries an uploaded wheel.
const UploadField = "wheel"

// receiveWheel reads a multipart body holding exactly one .whl in field "wheel", stores it
// under <data>/uploads/sha256/<hex>.whl (write to a temp file, fsync, rename) and returns
// it. Nothing is stored unless every check passes; on failure it writes the response.
func (s *Server) receiveWheel(w http.ResponseWriter, r *http.Request) (*Upload, bool) {
	if s.o.DataDir == "" {
		writeError(w, http.StatusNotImplemented, "wheel uploads are not enabled on this broker", "start the broker with a data directory")
		return nil, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.o.MaxUpload+64<<10) // room for the multipart framing
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed multipart body: "+err.Error(), "")
		return nil, false
	}
	part, err := mr.NextPart()
	if err != nil {
		s.bodyError(w, "reading the multipart body", err)
		return nil, false
	}
	defer part.Close()
	if part.FormName() != UploadField {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("multipart field %q, want %q", part.FormName(), UploadField), "upload with: curl -F wheel=@file.whl")
		return nil, false
	}
	// Part.FileName strips directories silently; read the raw value and refuse them.
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	name := params["filename"]
	if err != nil || name == "" {
		writeError(w, http.StatusBadRequest, "the wheel part has no file name", "")
		return nil, false
	}
	if strings.ContainsAny(name, `/\`) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("file name %q contains a path separator", name), "send the bare wheel file name")
		return nil, false
	}
	if _, err := wheel.ParseFilename(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "wheel names follow {name}-{version}-{python}-{abi}-{platform}.whl")
		return nil, false
	}
	dir := filepath.Join(s.o.DataDir, "uploads", "sha256")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	defer tmp.Close()
	h := sha256.New()
	var head bytes.Buffer
	n, err := io.Copy(io.MultiWriter(tmp, h, &limitedBuffer{b: &head, n: 4}), io.LimitReader(part, s.o.MaxUpload+1))
	if err != nil {
		s.bodyError(w, "reading the wheel", err)
		return nil, false
	}
	if n > s.o.MaxUpload {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("wheel larger than %d bytes", s.o.MaxUpload), "")
		return nil, false
	}
	if !bytes.Equal(head.Bytes(), []byte("PK\x03\x04")) {
		writeError(w, http.StatusBadRequest, name+" is not a zip archive", "upload the .whl file itself")
		return nil, false
	}
	if _, err := mr.NextPart(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "more than one part in the upload", "send exactly one wheel")
		return nil, false
	}
	if err := tmp.Sync(); err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	if err := tmp.Close(); err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	sum := hex.EncodeToString(h.Sum(nil))
	final := filepath.Join(dir, sum+".whl")
	if err := os.Rename(tmp.Name(), final); err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	return &Upload{Filename: name, Path: final, SHA256: sum, Size: n}, true
}

// bodyError answers 413 for an over-long body, 400 otherwise.
func (s *Server) bodyError(w http.ResponseWriter, what string, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: body larger than %d bytes", what, mbe.Limit), "")
		return
	}
	writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: %v", what, err), "")
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if rest := l.n - l.b.Len(); rest > 0 {
		l.b.Write(p[:min(rest, len(p))])
	}
	return len(p), nil
}
