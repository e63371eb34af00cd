package broker

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker/web"
)

// The approver web page signs in with a token once (POST /ui/login) and then uses the JSON
// API with a cookie session instead of a bearer token. The cookie is HttpOnly and
// SameSite=Strict (Secure on TLS); it names a random server-side session that holds the
// token's hash, never the token. Every state-changing call made with the cookie must carry
// CSRFHeader equal to the session's CSRF token, which only same-origin script can read.
const (
	UICookie     = "pylayer_ui"
	CSRFHeader   = "X-CSRF-Token"
	UISessionTTL = 8 * time.Hour
)

// uiCSP is the Content-Security-Policy of the page: nothing inline, nothing foreign.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// changed bumps the counter the page polls (GET /ui/version) to know when to refetch.
func (u *uiState) changed() { u.version.Add(1) }

func randomString() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("broker: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// uiRoutes are the page's routes; they are added to the API's in NewServer.
func (s *Server) uiRoutes() []route {
	return []route{
		{"GET /{$}", public, s.uiIndex},
		{"GET /static/{file}", public, s.uiStatic},
		{"POST /ui/login", public, s.uiLogin},
		{"POST /ui/logout", public, s.uiLogout},
		{"GET /ui/me", approver, s.uiMe},
		{"GET /ui/version", approver, s.uiVersion},
	}
}

// uiHeaders are the security headers of every page response.
func uiHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
}

func (s *Server) uiIndex(w http.ResponseWriter, r *http.Request, _ Token) {
	s.serveAsset(w, "index.html")
}

func (s *Server) uiStatic(w http.ResponseWriter, r *http.Request, _ Token) {
	s.serveAsset(w, r.PathValue("file"))
}

var assetTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

func (s *Server) serveAsset(w http.ResponseWriter, name string) {
	ct, ok := assetTypes[path.Ext(name)]
	b, err := fs.ReadFile(web.FS(), name)
	if !ok || err != nil || strings.HasPrefix(name, ".") {
		writeError(w, http.StatusNotFound, "no such file: /static/"+name, "")
		return
	}
	uiHeaders(w)
	w.Header().Set("Content-Type", ct)
	_, _ = w.Write(b)
}

// uiLoginBody is the JSON body of POST /ui/login.
type uiLoginBody struct {
	Token string `json:"token"`
}

// UIMe is the answer to POST /ui/login and GET /ui/me.
type UIMe struct {
	Subject string `json:"subject"`
	Role    string `json:"role"`
	CSRF    string `json:"csrf"`
	Expires string `json:"expires"`
}

// sameOrigin rejects a browser request whose Origin is another site's. Requests without
// Origin (non-browser clients) pass: they carry no ambient cookie of ours.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request, _ Token) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "sign-in from another origin", "")
		return
	}
	// Every attempt takes a token of its address; one with an owner's or admin's token gets
	// it back, so the address bucket counts guesses and one owner's sign-ins cannot lock
	// out others behind the same address. Those are limited by the subject's bucket.
	now, client := s.o.Now(), clientKey(r)
	if ok, wait := s.ui.addrs.allow(client, now); !ok {
		tooMany(w, wait, "too many failed sign-in attempts from this address")
		return
	}
	var b uiLoginBody
	if s.decodeJSON(w, r, &b, false) != nil {
		return
	}
	b.Token = strings.TrimSpace(b.Token)
	bad := func() {
		writeError(w, http.StatusUnauthorized, "unknown or malformed token", "paste an owner or admin token (pyl_...); pylayer token create mints one")
	}
	if len(b.Token) > maxSecret || !strings.HasPrefix(b.Token, TokenPrefix) {
		bad()
		return
	}
	t, err := s.o.Store.GetToken(r.Context(), HashToken(b.Token))
	if errors.Is(err, ErrNotFound) {
		bad()
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if t.Role != RoleOwner && t.Role != RoleAdmin {
		writeError(w, http.StatusForbidden, "the web page is for owners and admins; this is a "+t.Role+" token", "")
		return
	}
	s.ui.addrs.refund(client)
	if ok, wait := s.ui.subjects.allow(t.Subject, now); !ok {
		tooMany(w, wait, "too many sign-ins as "+t.Subject)
		return
	}
	se := &uiSession{id: randomString(), hash: t.Hash, subject: t.Subject, csrf: randomString(), expires: now.Add(UISessionTTL)}
	s.ui.add(se, now)
	if in, ok := r.Context().Value(infoKey{}).(*info); ok {
		in.subject, in.role = t.Subject, t.Role
	}
	http.SetCookie(w, &http.Cookie{Name: UICookie, Value: se.id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(UISessionTTL / time.Second)})
	if err := s.audit(r.Context(), t, AuditEvent{Action: "ui.login", Detail: "role=" + t.Role}); err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, UIMe{Subject: t.Subject, Role: t.Role, CSRF: se.csrf, Expires: se.expires.UTC().Format(time.RFC3339)})
}

// uiLogout ends the cookie session (it needs the CSRF header like any change).
func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request, _ Token) {
	if c, err := r.Cookie(UICookie); err == nil {
		s.ui.mu.Lock()
		se, ok := s.ui.sessions[c.Value]
		if ok && checkCSRF(r, *se) != nil {
			s.ui.mu.Unlock()
			writeError(w, http.StatusForbidden, "missing or wrong "+CSRFHeader, "")
			return
		}
		if ok {
			s.ui.remove(se)
		}
		s.ui.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: UICookie, Value: "", Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]string{"status": "signed out"})
}

func (s *Server) uiMe(w http.ResponseWriter, r *http.Request, t Token) {
	c, err := r.Cookie(UICookie)
	if err != nil {
		writeError(w, http.StatusBadRequest, "GET /ui/me is for the web page's cookie session", "")
		return
	}
	se, ok := s.ui.get(c.Value, s.o.Now())
	if !ok {
		writeError(w, http.StatusUnauthorized, "the web session ended", "sign in again")
		return
	}
	writeJSON(w, http.StatusOK, UIMe{Subject: t.Subject, Role: t.Role, CSRF: se.csrf, Expires: se.expires.UTC().Format(time.RFC3339)})
}

func (s *Server) uiVersion(w http.ResponseWriter, r *http.Request, _ Token) {
	writeJSON(w, http.StatusOK, map[string]int64{"version": s.ui.version.Load()})
}

// errCSRF: a cookie-authenticated change without the right CSRF header or from another origin.
var errCSRF = errors.New("csrf")

func checkCSRF(r *http.Request, se uiSession) error {
	if !sameOrigin(r) {
		return fmt.Errorf("%w: request from another origin", errCSRF)
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(se.csrf)) != 1 {
		return fmt.Errorf("%w: missing or wrong %s header", errCSRF, CSRFHeader)
	}
	return nil
}

// cookieToken authenticates a request by the page's session cookie. Changes (anything but
// GET and HEAD) need the CSRF header. The token is looked up again, so its role and
// existence are current.
func (s *Server) cookieToken(r *http.Request, c *http.Cookie) (Token, error) {
	se, ok := s.ui.get(c.Value, s.o.Now())
	if !ok {
		return Token{}, fmt.Errorf("%w: the web session expired or is unknown; sign in again", errUnauthenticated)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := checkCSRF(r, se); err != nil {
			return Token{}, err
		}
	}
	t, err := s.o.Store.GetToken(r.Context(), se.hash)
	if errors.Is(err, ErrNotFound) {
		return Token{}, fmt.Errorf("%w: the token of this web session is gone; sign in again", errUnauthenticated)
	}
	if err != nil {
		return Token{}, err
	}
	if t.Role != RoleOwner && t.Role != RoleAdmin {
		return Token{}, fmt.Errorf("%w: web sessions are for owners and admins", errUnauthenticated)
	}
	return t, nil
}
