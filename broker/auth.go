package broker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// TokenPrefix starts every token secret, so secret scanners can recognise one.
const TokenPrefix = "pyl_"

// NewToken makes a secret (32 random bytes, "pyl_" + base64url) and the sha256 hex hash
// that is the only thing stored.
func NewToken() (secret, hash string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("broker: crypto/rand failed: " + err.Error()) // never happens on supported systems
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, HashToken(secret)
}

// HashToken is the stored form of a secret.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateToken mints a token for role and subject, stores its hash, audits it and returns
// the secret, which is shown once and never stored. The CLI uses it for the first admin.
func (s *Server) CreateToken(ctx context.Context, role, subject string) (string, error) {
	switch role {
	case RoleAdmin, RoleOwner:
		if !validUser(subject) {
			return "", fmt.Errorf("creating token: %w: user name %q must be 1-64 of [A-Za-z0-9._@-]", ErrInvalid, subject)
		}
	case RoleAgent:
		if _, err := s.o.Store.GetSession(ctx, subject); err != nil {
			return "", fmt.Errorf("creating agent token: %w", err)
		}
	default:
		return "", fmt.Errorf("creating token: %w: role %q, want admin, owner or agent", ErrInvalid, role)
	}
	secret, hash := NewToken()
	if err := s.o.Store.PutToken(ctx, Token{Hash: hash, Role: role, Subject: subject, Created: s.o.Now().UTC()},
		AuditEvent{Time: s.o.Now().UTC(), Actor: "cli", Action: "token.create", Detail: "role=" + role + " subject=" + subject}); err != nil {
		return "", fmt.Errorf("creating token: %w", err)
	}
	return secret, nil
}

func validUser(u string) bool {
	if len(u) == 0 || len(u) > 64 {
		return false
	}
	for _, c := range u {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._@-", c)) {
			return false
		}
	}
	return true
}

// errUnauthenticated wraps every reason a request has no valid token.
var errUnauthenticated = errors.New("unauthenticated")

// maxSecret bounds what is hashed: real secrets are 47 bytes.
const maxSecret = 256

// authenticate finds the token of the request. The secret is never compared: its hash is
// looked up, so timing reveals nothing about stored secrets.
func (s *Server) authenticate(r *http.Request) (Token, error) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if h == "" {
		if c, err := r.Cookie(UICookie); err == nil && c.Value != "" {
			return s.cookieToken(r, c) // the web page's session (ui.go)
		}
		return Token{}, fmt.Errorf("%w: no bearer token", errUnauthenticated)
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || len(secret) > maxSecret || !strings.HasPrefix(secret, TokenPrefix) {
		return Token{}, fmt.Errorf("%w: malformed Authorization header, want: Bearer pyl_...", errUnauthenticated)
	}
	t, err := s.token(r.Context(), HashToken(secret))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Token{}, fmt.Errorf("%w: unknown token", errUnauthenticated)
		}
		return Token{}, err
	}
	return t, nil
}

// tokenTTL is how long a token found in the store is known without asking it again. A
// stored token never changes (the store has no update of one); the TTL bounds how long a
// token deleted from the database by hand still works here. An unknown hash is never
// remembered, so a new token works at once on every replica.
const tokenTTL = 5 * time.Second

// maxTokens bounds the tokens kept: one per live agent session and a few people.
const maxTokens = 1 << 16

// token looks up a token by hash, from the server's cache when it was found moments ago:
// every agent call authenticates, and the lookup was one of its few round trips.
func (s *Server) token(ctx context.Context, hash string) (Token, error) {
	if t, ok := s.tokens.Get(hash); ok {
		return t, nil
	}
	t, err := s.o.Store.GetToken(ctx, hash)
	if err == nil {
		s.tokens.Put(hash, t)
	}
	return t, err
}

// authed wraps a handler with authentication and the route's role check.
func (s *Server) authed(acc access, h func(http.ResponseWriter, *http.Request, Token)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acc == public {
			h(w, r, Token{})
			return
		}
		t, err := s.authenticate(r)
		if err != nil {
			if errors.Is(err, errCSRF) {
				writeError(w, http.StatusForbidden, err.Error(), "the web page sends "+CSRFHeader+" with every change; reload it")
				return
			}
			if !errors.Is(err, errUnauthenticated) {
				s.internal(w, r, err)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pylayer"`)
			writeError(w, http.StatusUnauthorized, err.Error(), "send Authorization: Bearer <token>; ask an admin or the session owner for one")
			return
		}
		if in, ok := r.Context().Value(infoKey{}).(*info); ok {
			in.subject, in.role = t.Subject, t.Role
		}
		switch {
		case acc == approver && t.Role == RoleAgent,
			acc == adminOnly && t.Role != RoleAdmin:
			writeError(w, http.StatusForbidden, "a "+t.Role+" token may not do this", "")
			return
		}
		h(w, r, t)
	})
}

// canSee reports whether t may act on session se (which may not exist: then only admins
// and owners learn so, through ErrNotFound from the store). Agents see only their session.
func canSee(t Token, se Session) bool {
	switch t.Role {
	case RoleAdmin:
		return true
	case RoleOwner:
		return se.Owner == t.Subject
	case RoleAgent:
		return se.ID == t.Subject
	}
	return false
}

// session loads a session for t, writing 403/404 if t may not act on it. Agents get 403
// for another session whether or not it exists.
func (s *Server) session(w http.ResponseWriter, r *http.Request, t Token, id string) (Session, bool) {
	if t.Role == RoleAgent && id != t.Subject {
		writeError(w, http.StatusForbidden, "this token is for another session", "")
		return Session{}, false
	}
	se, err := s.o.Store.GetSession(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err)
		return Session{}, false
	}
	if !canSee(t, se) {
		writeError(w, http.StatusForbidden, "session "+id+" belongs to another owner", "")
		return Session{}, false
	}
	return se, true
}

// request loads a request for t, writing 403/404 like session if t may not see it.
func (s *Server) request(w http.ResponseWriter, r *http.Request, t Token, id string) (Request, bool) {
	req, err := s.o.Store.GetRequest(r.Context(), id)
	if err != nil {
		if t.Role == RoleAgent && errors.Is(err, ErrNotFound) {
			writeError(w, http.StatusForbidden, "this token is for another session", "")
			return Request{}, false
		}
		s.storeError(w, r, err)
		return Request{}, false
	}
	if t.Role == RoleAgent && req.SessionID == t.Subject {
		return req, true // its own session's: no need to read the session (agents poll this)
	}
	_, ok := s.session(w, r, t, req.SessionID)
	return req, ok
}
