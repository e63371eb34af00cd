package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/internal/lazyre"
)

// UploadQuota bounds the uploaded wheels one session holds at once: every stored upload
// counts until its request is refused, denied or collected (POST /v1/gc). Zero fields get
// the defaults.
type UploadQuota struct {
	Bytes int64 // default DefaultQuotaBytes
	Count int   // default DefaultQuotaCount
}

// Default upload quota of a session.
const (
	DefaultQuotaBytes = 1 << 30
	DefaultQuotaCount = 32
)

func (q UploadQuota) withDefaults() UploadQuota {
	if q.Bytes <= 0 {
		q.Bytes = DefaultQuotaBytes
	}
	if q.Count <= 0 {
		q.Count = DefaultQuotaCount
	}
	return q
}

// UploadForgetter is implemented by a Classifier that keeps its own reference to uploaded
// wheels (the builder links them into its wheelhouse). The server calls ForgetUpload when it
// deletes the last stored copy of a wheel, so no reference outlives the upload.
type UploadForgetter interface {
	ForgetUpload(ctx context.Context, u Upload) error
}

// Errors of the upload quota.
var (
	errQuotaCount = errors.New("upload quota: count")
	errQuotaBytes = errors.New("upload quota: bytes")
)

// quotaError answers 429 (too many uploads) or 413 (too many bytes) with what to do.
func (s *Server) quotaError(w http.ResponseWriter, err error) {
	q := s.o.Quota
	hint := "ask an approver to decide this session's pending uploads (a denied or refused upload is deleted), or ask for packages by name"
	switch {
	case errors.Is(err, errQuotaCount):
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("this session holds %d uploaded wheels, its quota", q.Count), hint)
	case errors.Is(err, errQuotaBytes):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("this upload would take the session past its quota of %d bytes of uploaded wheels", q.Bytes), hint)
	default:
		writeError(w, http.StatusInternalServerError, "internal error", "try again; if it persists, the broker's log has the cause")
	}
}

// The uploads of a session are stored as <data>/uploads/<session>/<sha256>/<filename>:
// one file per distinct wheel of the session, whichever of its requests name it. Uploads
// are written in <data>/uploads/.incoming and renamed into place once checked.
const incomingDir = ".incoming"

// safeName is what a session id must look like to become a directory name.
var safeName = lazyre.New(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// uploadBook keeps the accounts of the uploads: what each session holds on disk (read once,
// then kept in step), what is being received, and what a request in the making holds
// (pinned, so a sweep leaves it alone). Its mutex also orders sweeps against new uploads.
type uploadBook struct {
	root  string // <data>/uploads; "" when uploads are off
	quota UploadQuota

	mu       sync.Mutex
	sessions map[string]*heldUploads
	temps    map[string]bool // files in incomingDir being written
	rebases  map[string]int  // sessions being rebased: not swept
}

type heldUploads struct {
	files       map[string]int64 // "<sha256>/<filename>" -> size
	bytes       int64
	flightBytes int64 // being received
	flightCount int
	pinned      map[string]int
}

func newUploadBook(dataDir string, q UploadQuota) *uploadBook {
	b := &uploadBook{quota: q, sessions: map[string]*heldUploads{}, temps: map[string]bool{}, rebases: map[string]int{}}
	if dataDir != "" {
		b.root = filepath.Join(dataDir, "uploads")
	}
	return b
}

// rebasing marks session as being rebased (on) or no longer (off). A rebase drops the
// session's bindings and then asks again for what they held: in between, bound uploads
// look unheld, so sweeps leave the session alone.
func (b *uploadBook) rebasing(session string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.rebases[session]++
	} else if b.rebases[session]--; b.rebases[session] <= 0 {
		delete(b.rebases, session)
	}
}

// held returns the accounts of session, reading its directory the first time. b.mu is held.
func (b *uploadBook) held(session string) (*heldUploads, error) {
	if h := b.sessions[session]; h != nil {
		return h, nil
	}
	h := &heldUploads{files: map[string]int64{}, pinned: map[string]int{}}
	if err := b.scan(session, h); err != nil {
		return nil, err
	}
	b.sessions[session] = h
	return h, nil
}

// scan reads what session holds on disk into h. b.mu is held.
func (b *uploadBook) scan(session string, h *heldUploads) error {
	h.files, h.bytes = map[string]int64{}, 0
	err := filepath.WalkDir(filepath.Join(b.root, session), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(b.root, session), p)
		h.files[filepath.ToSlash(rel)] = fi.Size()
		h.bytes += fi.Size()
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the uploads of session %s: %w", session, err)
	}
	return nil
}

// uploadTicket is one upload being received: it holds a place in the session's count and
// the bytes written so far against its byte quota.
type uploadTicket struct {
	b         *uploadBook
	session   string
	h         *heldUploads
	n         int64
	ended     bool
	tmp       string
	committed bool
}

// begin starts an upload for session, or fails with errQuotaCount.
func (b *uploadBook) begin(session string) (*uploadTicket, error) {
	if !safeName().MatchString(session) {
		return nil, fmt.Errorf("session id %q cannot name an upload directory", session)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h, err := b.held(session)
	if err != nil {
		return nil, err
	}
	if len(h.files)+h.flightCount >= b.quota.Count {
		return nil, errQuotaCount
	}
	h.flightCount++
	return &uploadTicket{b: b, session: session, h: h}, nil
}

// Write counts p against the session's byte quota; it fails with errQuotaBytes past it.
func (t *uploadTicket) Write(p []byte) (int, error) {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	if t.h.bytes+t.h.flightBytes+int64(len(p)) > t.b.quota.Bytes {
		return 0, errQuotaBytes
	}
	t.h.flightBytes += int64(len(p))
	t.n += int64(len(p))
	return len(p), nil
}

// create makes the temporary file the upload is received into.
func (t *uploadTicket) create() (*os.File, error) {
	dir := filepath.Join(t.b.root, incomingDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("making the uploads directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		return nil, fmt.Errorf("receiving an upload: %w", err)
	}
	t.b.mu.Lock()
	t.b.temps[filepath.Base(f.Name())] = true
	t.b.mu.Unlock()
	t.tmp = f.Name()
	return f, nil
}

// discard removes the temporary file unless it was committed.
func (t *uploadTicket) discard(f *os.File) {
	f.Close()
	if !t.committed {
		os.Remove(f.Name())
	}
	t.b.mu.Lock()
	delete(t.b.temps, filepath.Base(f.Name()))
	t.b.mu.Unlock()
}

// end gives back the ticket's place and bytes in flight.
func (t *uploadTicket) end() {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	if !t.ended {
		t.ended = true
		t.h.flightCount--
		t.h.flightBytes -= t.n
	}
}

// commit moves the checked temporary file into place, counts it as held and pins it for
// the request being made (unpin when the request is stored or refused).
func (t *uploadTicket) commit(tmp, name, sum string, size int64) (*Upload, error) {
	b := t.b
	rel := sum + "/" + name
	dir := filepath.Join(b.root, t.session, sum)
	final := filepath.Join(dir, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("storing upload %s: %w", name, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, fmt.Errorf("storing upload %s: %w", name, err)
	}
	t.committed = true
	if err := fsx.SyncDir(context.Background(), dir); err != nil {
		return nil, fmt.Errorf("storing upload %s: %w", name, err)
	}
	if _, ok := t.h.files[rel]; !ok { // the same wheel again is the same file
		t.h.files[rel] = size
		t.h.bytes += size
	}
	t.h.pinned[rel]++
	return &Upload{Filename: name, Path: final, SHA256: sum, Size: size, session: t.session}, nil
}

// unpin ends the hold of a request in the making on up.
func (b *uploadBook) unpin(up *Upload) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.sessions[up.session]; h != nil {
		rel := up.SHA256 + "/" + up.Filename
		if h.pinned[rel]--; h.pinned[rel] <= 0 {
			delete(h.pinned, rel)
		}
	}
}
