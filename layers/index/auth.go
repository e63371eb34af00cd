package index

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// credential is what the client sends to the index origin. It never prints
// its secrets.
type credential struct {
	user, password string // Basic
	token          string // Bearer when non-empty
}

func (c *credential) String() string   { return "[redacted credential]" }
func (c *credential) GoString() string { return "[redacted credential]" }

func (c *credential) header() string {
	if c.token != "" {
		return "Bearer " + c.token
	}
	req := &http.Request{Header: http.Header{}}
	req.SetBasicAuth(c.user, c.password)
	return req.Header.Get("Authorization")
}

// origin returns scheme://host:port of u, lower-cased, with the default
// port made explicit, so that "https://h" and "https://H:443" are equal.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// credentialFor picks the credential for the index: URL userinfo first
// ("user:pass" is Basic, ":token" is Bearer, "user" alone takes its password
// from a netrc entry with that login), else the netrc entry for the host
// ("login bearer" means Bearer with the password as token).
func credentialFor(u *url.URL, netrc []netrcEntry) *credential {
	host := strings.ToLower(u.Hostname())
	entry := lookupNetrc(netrc, host)
	if u.User != nil {
		user := u.User.Username()
		pass, hasPass := u.User.Password()
		switch {
		case user == "" && pass != "":
			return &credential{token: pass}
		case user != "" && hasPass:
			return &credential{user: user, password: pass}
		case user != "":
			if entry != nil && entry.login == user {
				return &credential{user: user, password: entry.password}
			}
			return &credential{user: user}
		}
	}
	if entry == nil || (entry.login == "" && entry.password == "") {
		return nil
	}
	if strings.EqualFold(entry.login, "bearer") {
		return &credential{token: entry.password}
	}
	return &credential{user: entry.login, password: entry.password}
}

type netrcEntry struct {
	machine         string // "" for the default entry
	login, password string
}

func lookupNetrc(entries []netrcEntry, host string) *netrcEntry {
	var def *netrcEntry
	for i := range entries {
		e := &entries[i]
		if e.machine == "" {
			if def == nil {
				def = e
			}
			continue
		}
		if strings.EqualFold(e.machine, host) {
			return e
		}
	}
	return def
}

// readNetrc loads a netrc file. A missing file is an error only if
// mustExist. Errors name the file and line, never a token.
func readNetrc(path string, mustExist bool) ([]netrcEntry, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !mustExist && errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading netrc: %w", err)
	}
	entries, err := parseNetrc(data)
	if err != nil {
		return nil, fmt.Errorf("parsing netrc %s: %w", path, err)
	}
	return entries, nil
}

// parseNetrc parses the netrc format: whitespace-separated tokens, "#"
// comment lines, double-quoted tokens with backslash escapes, and macdef
// bodies that run to the next empty line.
func parseNetrc(data []byte) ([]netrcEntry, error) {
	var entries []netrcEntry
	cur := -1
	pending, pendingLine := "", 0
	inMacro := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if inMacro {
			inMacro = strings.TrimSpace(line) != ""
			continue
		}
		toks, err := netrcTokens(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		for _, tok := range toks {
			if pending != "" {
				switch pending {
				case "machine":
					entries = append(entries, netrcEntry{machine: tok})
					cur = len(entries) - 1
				case "login", "password", "account":
					if cur < 0 {
						return nil, fmt.Errorf("line %d: %q outside a machine or default entry", pendingLine, pending)
					}
					if pending == "login" {
						entries[cur].login = tok
					} else if pending == "password" {
						entries[cur].password = tok
					}
				case "macdef":
					inMacro = true
				}
				pending = ""
				if inMacro {
					break // the body starts on the next line
				}
				continue
			}
			switch tok {
			case "machine", "login", "password", "account", "macdef":
				pending, pendingLine = tok, n
			case "default":
				entries = append(entries, netrcEntry{})
				cur = len(entries) - 1
			default:
				// never echo the token: it may be a secret
				return nil, fmt.Errorf("line %d: unexpected token", n)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if pending != "" {
		return nil, fmt.Errorf("line %d: %q needs a value", pendingLine, pending)
	}
	return entries, nil
}

func netrcTokens(line string) ([]string, error) {
	var toks []string
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '#' && len(toks) == 0:
			return toks, nil
		case c == '"':
			var b strings.Builder
			i++
			closed := false
			for i < len(line) {
				if line[i] == '\\' && i+1 < len(line) {
					b.WriteByte(line[i+1])
					i += 2
					continue
				}
				if line[i] == '"' {
					closed = true
					i++
					break
				}
				b.WriteByte(line[i])
				i++
			}
			if !closed {
				return nil, errors.New("unterminated quoted token")
			}
			toks = append(toks, b.String())
		default:
			j := i
			for j < len(line) && !strings.ContainsRune(" \t\r\n", rune(line[j])) {
				j++
			}
			toks = append(toks, line[i:j])
			i = j
		}
	}
	return toks, nil
}

var _ http.RoundTripper = (*authTransport)(nil)

// authTransport adds the index credential to requests for the index origin
// only, so redirects and file URLs on other hosts never see it.
type authTransport struct {
	base   http.RoundTripper
	origin string
	cred   *credential
	ua     string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Del("Authorization")
	if t.cred != nil && origin(req.URL) == t.origin {
		r.Header.Set("Authorization", t.cred.header())
	}
	if r.Header.Get("User-Agent") == "" {
		r.Header.Set("User-Agent", t.ua)
	}
	return t.base.RoundTrip(r)
}
