package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// releaseUpload unpins up once its request is stored (or failed to be) and deletes it at
// once unless a request still holds it: a rejected upload does not stay.
func (s *Server) releaseUpload(ctx context.Context, up *Upload) {
	s.uploads.unpin(up)
	if _, err := s.sweepSession(ctx, up.session); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "deleting uploads", slog.String("error", err.Error()))
	}
}

// uploadHeld reports whether request r holds the upload sha/filename of its session: it
// names the file, its packages do not say it is other bytes, and it is live (waiting,
// building, or bound with its binding in place).
func uploadHeld(r Request, bound map[string]bool, sum, filename string) bool {
	if r.Upload != filename {
		return false
	}
	for _, p := range r.Packages {
		if p.Filename == filename && p.SHA256 != "" && p.SHA256 != sum {
			return false
		}
	}
	switch r.State {
	case StateClassifying, StatePending, StateApproved, StateBuilding, StateBuilt:
		return true
	case StateBound:
		return bound[r.ID]
	}
	return false // denied, rejected, failed
}

// sweepResult is what a sweep deleted.
type sweepResult struct {
	files []string // wheel file names
	bytes int64
}

// sweepSession deletes the uploads of session that no request holds, and tells the
// classifier to forget each wheel no other session holds either.
func (s *Server) sweepSession(ctx context.Context, session string) (sweepResult, error) {
	b := s.uploads
	var res sweepResult
	if b.root == "" || !safeName().MatchString(session) {
		return res, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rebases[session] > 0 {
		return res, nil
	}
	h, err := b.held(session)
	if err != nil {
		return res, err
	}
	if err := b.scan(session, h); err != nil { // another process may have changed it
		return res, err
	}
	if len(h.files) == 0 {
		if h.flightCount == 0 {
			delete(b.sessions, session)
		}
		return res, nil
	}
	reqs, err := s.o.Store.ListRequests(ctx, RequestFilter{SessionID: session})
	if err != nil {
		return res, fmt.Errorf("listing the requests of session %s: %w", session, err)
	}
	bs, err := s.o.Store.Bindings(ctx, session)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return res, fmt.Errorf("listing the bindings of session %s: %w", session, err)
	}
	bound := map[string]bool{}
	for _, bi := range bs {
		bound[bi.RequestID] = true
	}
	for rel, size := range h.files {
		sum, name, ok := strings.Cut(rel, "/")
		if !ok { // a stray file, not <sha256>/<filename>
			name = rel
		}
		if h.pinned[rel] > 0 {
			continue
		}
		held := false
		for _, r := range reqs {
			if ok && uploadHeld(r, bound, sum, name) {
				held = true
				break
			}
		}
		if held {
			continue
		}
		p := filepath.Join(b.root, session, filepath.FromSlash(rel))
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("deleting upload %s of session %s: %w", name, session, err)
		}
		os.Remove(filepath.Dir(p)) // the <sha256> directory, if now empty
		delete(h.files, rel)
		h.bytes -= size
		res.files = append(res.files, name)
		res.bytes += size
		if ok && !b.elsewhere(session, rel) {
			s.forget(ctx, Upload{Filename: name, SHA256: sum, Size: size})
		}
	}
	os.Remove(filepath.Join(b.root, session)) // if now empty
	return res, nil
}

// elsewhere reports whether a session other than session holds rel. b.mu is held.
func (b *uploadBook) elsewhere(session, rel string) bool {
	sum, name, _ := strings.Cut(rel, "/")
	m, _ := filepath.Glob(filepath.Join(b.root, "*", sum, name))
	for _, p := range m {
		if filepath.Base(filepath.Dir(filepath.Dir(p))) != session {
			return true
		}
	}
	return false
}

// forget tells the classifier (or builder) that keeps references to uploads that u is gone.
func (s *Server) forget(ctx context.Context, u Upload) {
	f, ok := s.o.Classifier.(UploadForgetter)
	if !ok {
		if f, ok = s.o.Builder.(UploadForgetter); !ok {
			return
		}
	}
	if err := f.ForgetUpload(ctx, u); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "forgetting an upload", slog.String("wheel", u.Filename), slog.String("error", err.Error()))
	}
}

// sweepUploads sweeps every session's uploads and removes temporary files that no upload
// in progress is writing (left by a broker that stopped mid-upload).
func (s *Server) sweepUploads(ctx context.Context) (sweepResult, error) {
	b := s.uploads
	var res sweepResult
	if b.root == "" {
		return res, nil
	}
	des, err := os.ReadDir(b.root)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("listing uploads: %w", err)
	}
	for _, de := range des {
		switch {
		case de.Name() == incomingDir:
			b.mu.Lock()
			tmps, _ := os.ReadDir(filepath.Join(b.root, incomingDir))
			for _, t := range tmps {
				if !b.temps[t.Name()] {
					os.Remove(filepath.Join(b.root, incomingDir, t.Name()))
				}
			}
			b.mu.Unlock()
		case de.IsDir() && safeName().MatchString(de.Name()):
			r, err := s.sweepSession(ctx, de.Name())
			if err != nil {
				return res, err
			}
			res.files = append(res.files, r.files...)
			res.bytes += r.bytes
		}
	}
	return res, nil
}
