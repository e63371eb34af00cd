package broker

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/wheel"
)

// UploadField is the multipart form field that carries an uploaded wheel.
const UploadField = "wheel"

// Limits of an uploaded wheel's archive, checked before it is stored: the limits the
// build's install would refuse it at, so a wheel that cannot be built is refused at once.
const (
	MaxWheelEntries    = wheel.DefaultMaxFiles      // archive members
	MaxWheelMemberSize = wheel.DefaultMaxFileBytes  // one member, uncompressed
	MaxWheelUnpacked   = wheel.DefaultMaxTotalBytes // the sum of the members' uncompressed sizes
)

// receiveWheel reads a multipart body holding exactly one .whl in field "wheel" for
// session se and stores it. The name is checked before a byte is written; the bytes stream
// (hashed, counted against the per-wheel limit and the session's quota) into a temporary
// file in the data dir, which is checked as a wheel (zip structure, sizes, dist-info,
// METADATA) and only then renamed into place: a refused upload leaves nothing, an accepted
// one exists once. The upload comes back pinned (see uploadBook); on failure it writes the
// response.
func (s *Server) receiveWheel(w http.ResponseWriter, r *http.Request, se Session) (*Upload, bool) {
	if s.o.DataDir == "" {
		writeError(w, http.StatusNotImplemented, "wheel uploads are not enabled on this broker", "start the broker with a data directory")
		return nil, false
	}
	// A wheel may be large: its body gets the upload timeout instead of the read timeout.
	extendDeadlines(w, s.o.HTTP.UploadTimeout, 0)
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
	name, ok := checkWheelPart(w, part)
	if !ok {
		return nil, false
	}
	ticket, err := s.uploads.begin(se.ID)
	if err != nil {
		s.quotaError(w, err)
		return nil, false
	}
	defer ticket.end()
	tmp, err := ticket.create()
	if err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	defer ticket.discard(tmp) // after a successful commit there is nothing left to remove
	h := sha256.New()
	var head limitedBuffer
	head.n = 4
	n, err := io.Copy(io.MultiWriter(ticket, tmp, h, &head), io.LimitReader(part, s.o.MaxUpload+1))
	if errors.Is(err, errQuotaBytes) {
		s.quotaError(w, err)
		return nil, false
	}
	if err != nil {
		s.bodyError(w, "reading the wheel", err)
		return nil, false
	}
	if n > s.o.MaxUpload {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("wheel larger than %d bytes", s.o.MaxUpload), "")
		return nil, false
	}
	switch _, err := mr.NextPart(); {
	case err == nil:
		writeError(w, http.StatusBadRequest, "more than one part in the upload", "send exactly one wheel")
		return nil, false
	case !errors.Is(err, io.EOF):
		s.bodyError(w, "reading the multipart body", err)
		return nil, false
	}
	if string(head.b) != "PK\x03\x04" {
		writeError(w, http.StatusBadRequest, name+" is not a zip archive", "upload the .whl file itself")
		return nil, false
	}
	if err := tmp.Sync(); err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	if err := checkWheel(tmp, n, name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "upload a wheel built by a standard tool (pip wheel, python -m build)")
		return nil, false
	}
	if err := tmp.Close(); err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	up, err := ticket.commit(tmp.Name(), name, hex.EncodeToString(h.Sum(nil)), n)
	if err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	return up, true
}

// checkWheelPart checks the part's field and raw file name; on failure it answers 400.
func checkWheelPart(w http.ResponseWriter, part *multipart.Part) (string, bool) {
	if part.FormName() != UploadField {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("multipart field %q, want %q", part.FormName(), UploadField), "upload with: curl -F wheel=@file.whl")
		return "", false
	}
	// Part.FileName strips directories silently; read the raw value and refuse them.
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	name := params["filename"]
	if err != nil || name == "" {
		writeError(w, http.StatusBadRequest, "the wheel part has no file name", "")
		return "", false
	}
	if strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".." {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("file name %q contains a path separator", name), "send the bare wheel file name")
		return "", false
	}
	if _, err := wheel.ParseFilename(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "wheel names follow {name}-{version}-{python}-{abi}-{platform}.whl")
		return "", false
	}
	return name, true
}

// checkWheel checks the archive in f (size bytes, uploaded as name) as a wheel before it
// is stored: a readable zip with at most MaxWheelEntries members of at most
// MaxWheelUnpacked bytes in all (MaxWheelMemberSize each), member names that stay inside the archive, one
// <name>-<version>.dist-info matching the file name, with a WHEEL file and a METADATA that
// names the same project and version. Errors name the wheel by name, never by path.
func checkWheel(f *os.File, size int64, name string) error {
	fn, err := wheel.ParseFilename(name)
	if err != nil {
		return err
	}
	zr, err := zip.NewReader(f, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return fmt.Errorf("%s is not a zip archive: %v", name, err)
	}
	if len(zr.File) > MaxWheelEntries {
		return fmt.Errorf("%s has %d members, at most %d", name, len(zr.File), MaxWheelEntries)
	}
	var total uint64
	distInfo := map[string]bool{}
	members := map[string]*zip.File{}
	for _, zf := range zr.File {
		if err := checkMemberName(zf.Name); err != nil {
			return fmt.Errorf("%s: member %q: %v", name, zf.Name, err)
		}
		if members[zf.Name] != nil {
			return fmt.Errorf("%s: duplicate member %q", name, zf.Name)
		}
		members[zf.Name] = zf
		if zf.UncompressedSize64 > MaxWheelMemberSize {
			return fmt.Errorf("%s: member %q unpacks to %d bytes, at most %d", name, zf.Name, zf.UncompressedSize64, uint64(MaxWheelMemberSize))
		}
		if total += zf.UncompressedSize64; total > MaxWheelUnpacked {
			return fmt.Errorf("%s unpacks to more than %d bytes", name, uint64(MaxWheelUnpacked))
		}
		if top, _, ok := strings.Cut(zf.Name, "/"); ok && strings.HasSuffix(top, ".dist-info") {
			distInfo[top] = true
		}
	}
	if len(distInfo) != 1 {
		return fmt.Errorf("%s has %d .dist-info directories, want exactly one", name, len(distInfo))
	}
	var di string
	for d := range distInfo {
		di = d
	}
	diName, diVersion, _ := strings.Cut(strings.TrimSuffix(di, ".dist-info"), "-")
	if wheel.NormalizeName(diName) != fn.Project() || !sameVersion(diVersion, fn.Version) {
		return fmt.Errorf("%s: its %s is for another project or version", name, di)
	}
	if members[di+"/WHEEL"] == nil {
		return fmt.Errorf("%s has no %s/WHEEL", name, di)
	}
	meta, _, err := wheel.ReadMetadata(f.Name())
	if err != nil {
		// ReadMetadata names the file by its path: the agent must see only the wheel's name.
		return errors.New(strings.ReplaceAll(err.Error(), f.Name(), name))
	}
	if wheel.NormalizeName(meta.Name) != fn.Project() || !sameVersion(meta.Version, fn.Version) {
		return fmt.Errorf("%s: its METADATA is for %s %s", name, meta.Name, meta.Version)
	}
	return nil
}

// checkMemberName refuses member names that would leave the archive's root.
func checkMemberName(n string) error {
	switch {
	case n == "" || len(n) > 4096:
		return errors.New("empty or longer than 4096 bytes")
	case strings.HasPrefix(n, "/"):
		return errors.New("absolute path")
	case strings.ContainsAny(n, "\\\x00"):
		return errors.New("backslash or NUL in path")
	}
	for _, c := range strings.Split(strings.TrimSuffix(n, "/"), "/") {
		if c == ".." || c == "." || c == "" {
			return errors.New("'.', '..' or an empty component")
		}
	}
	if path.Clean(n) != strings.TrimSuffix(n, "/") {
		return errors.New("not a clean path")
	}
	return nil
}

// sameVersion compares two versions as PEP 440 does, or as strings when one does not parse.
func sameVersion(a, b string) bool {
	va, err1 := pep440.Parse(a)
	vb, err2 := pep440.Parse(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return va.Compare(vb) == 0
}

// bodyError answers 413 for an over-long body, 408 for one that did not arrive in time,
// 400 otherwise. It never shows the connection's addresses.
func (s *Server) bodyError(w http.ResponseWriter, what string, err error) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: body larger than %d bytes", what, mbe.Limit), "")
	case errTimeout(err):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, what+": the body did not arrive in time", "send the whole body at once; a slow link needs a broker with a longer timeout")
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: %v", what, err), "")
	}
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b []byte
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if rest := l.n - len(l.b); rest > 0 {
		l.b = append(l.b, p[:min(rest, len(p))]...)
	}
	return len(p), nil
}
