package index

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// ServerOption configures a Server.
type ServerOption func(*serverOptions) error

type serverOptions struct {
	maxMeta   int64
	allowJSON bool
	metaFiles bool
}

// WithJSON enables (the default) or disables PEP 691 JSON responses;
// disabled, every client gets HTML, which lets tests drive pip through HTML.
func WithJSON(enabled bool) ServerOption {
	return func(o *serverOptions) error {
		o.allowJSON = enabled
		return nil
	}
}

// WithMetadataFiles enables (the default) or disables PEP 658/714 metadata
// files: disabled, no page announces one and every "<filename>.metadata" is
// 404. With WithJSON(false) too, the server is a plain PEP 503 index (HTML
// with #sha256= fragments, no sizes, no metadata files), the kind a directory
// behind a web server gives; files still answer Range requests.
func WithMetadataFiles(enabled bool) ServerOption {
	return func(o *serverOptions) error {
		o.metaFiles = enabled
		return nil
	}
}

// Server serves the distribution files directly inside one directory as a
// simple index: /simple/ (projects), /simple/<project>/ (files),
// /files/<filename> and /files/<filename>.metadata (PEP 658). A sidecar
// "<filename>.yanked" marks a file yanked, its trimmed content the reason.
type Server struct {
	st        *store
	allowJSON bool
	metaFiles bool
}

var _ http.Handler = (*Server)(nil)

// NewServer serves dir. Symlinks are followed only within dir.
func NewServer(dir string, opts ...ServerOption) (*Server, error) {
	o := &serverOptions{maxMeta: 16 << 20, allowJSON: true, metaFiles: true}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	root, err := openRoot(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{st: &store{root: root, maxMeta: o.maxMeta}, allowJSON: o.allowJSON, metaFiles: o.metaFiles}
	if err := s.st.refresh(); err != nil {
		root.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the directory handle.
func (s *Server) Close() error { return s.st.root.Close() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if err := s.st.refresh(); err != nil {
		http.Error(w, "index directory unavailable", http.StatusInternalServerError)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/simple":
		redirect(w, r, "/simple/")
	case p == "/simple/":
		s.serveRoot(w, r)
	case strings.HasPrefix(p, "/simple/"):
		s.serveProject(w, r, strings.TrimPrefix(p, "/simple/"))
	case strings.HasPrefix(p, "/files/"):
		s.serveFile(w, r, strings.TrimPrefix(p, "/files/"))
	default:
		http.NotFound(w, r)
	}
}

func redirect(w http.ResponseWriter, r *http.Request, to string) {
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, to, http.StatusMovedPermanently)
}

// format picks the response type from ?format= or Accept.
func (s *Server) format(w http.ResponseWriter, r *http.Request) (string, bool) {
	w.Header().Add("Vary", "Accept")
	var mt string
	if f := r.URL.Query().Get("format"); f != "" {
		mt = formatAliases[strings.ToLower(f)]
		if mt == mediaJSON && !s.allowJSON {
			mt = ""
		}
	} else {
		mt = negotiate(r.Header.Get("Accept"), s.allowJSON)
	}
	if mt == "" {
		http.Error(w, "not acceptable: this index serves "+strings.Join(s.offers(), ", "), http.StatusNotAcceptable)
		return "", false
	}
	return mt, true
}

func (s *Server) offers() []string {
	if s.allowJSON {
		return offered
	}
	return offered[1:]
}

func (s *Server) serveRoot(w http.ResponseWriter, r *http.Request) {
	mt, ok := s.format(w, r)
	if !ok {
		return
	}
	writeBody(w, r, mt, renderRoot(mt, s.st.projectNames()))
}

func (s *Server) serveProject(w http.ResponseWriter, r *http.Request, rest string) {
	name, slash := strings.CutSuffix(rest, "/")
	if !ValidName(name) {
		http.NotFound(w, r)
		return
	}
	norm := Normalize(name)
	if name != norm || !slash {
		redirect(w, r, "/simple/"+norm+"/")
		return
	}
	files, ok := s.st.files(norm)
	if !ok {
		http.NotFound(w, r)
		return
	}
	mt, ok := s.format(w, r)
	if !ok {
		return
	}
	writeBody(w, r, mt, renderProject(mt, norm, files, s.metaFiles))
}

func writeBody(w http.ResponseWriter, r *http.Request, mt string, body []byte) {
	w.Header().Set("Content-Type", mt+"; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	if !safeFilename(name) {
		http.NotFound(w, r)
		return
	}
	if d := s.st.lookup(name); d != nil {
		f, fi, err := s.st.openRegular(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, name, fi.ModTime(), f)
		return
	}
	wheel, ok := strings.CutSuffix(name, ".metadata")
	if !ok || !s.metaFiles || !strings.HasSuffix(wheel, ".whl") || s.st.lookup(wheel) == nil {
		http.NotFound(w, r)
		return
	}
	md, err := s.st.metadata(wheel)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, name, timeZero, bytes.NewReader(md))
}
