package broker_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// clock is a settable time for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// signIn posts token to /ui/login from the client address addr, in process.
func (e *env) signIn(token, addr string) (int, http.Header, *http.Cookie) {
	e.t.Helper()
	req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(`{"token": "`+token+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == broker.UICookie {
			return rec.Code, rec.Header(), c
		}
	}
	return rec.Code, rec.Header(), nil
}

// live reports whether the web session of cookie c is signed in.
func (e *env) live(c *http.Cookie) bool {
	e.t.Helper()
	req := httptest.NewRequest("GET", "/ui/me", nil)
	req.AddCookie(c)
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return rec.Code == http.StatusOK
}

// checkTooMany checks a 429 with a Retry-After of whole seconds.
func checkTooMany(t *testing.T, what string, code int, h http.Header) {
	t.Helper()
	if s, err := strconv.Atoi(h.Get("Retry-After")); code != http.StatusTooManyRequests || err != nil || s < 1 {
		t.Fatalf("%s: %d, Retry-After %q; want 429 with seconds", what, code, h.Get("Retry-After"))
	}
}

func TestSignInFlood(t *testing.T) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEnv(t, func(o *broker.Options) { o.Now = c.now })
	lim := broker.SignInLimits{}.WithDefaults()
	code, _, bob := e.signIn(e.bob, "198.51.100.7:1000")
	if code != 200 || bob == nil {
		t.Fatalf("bob: %d", code)
	}
	// alice signs in 10,000 times, from one address and then each from another: the time
	// stands still, so only her subject's burst gets through.
	ok := 0
	for i := range 10000 {
		addr := "192.0.2.1:1234"
		if i >= 5000 {
			addr = fmt.Sprintf("10.%d.%d.1:1", i/250, i%250)
		}
		code, h, _ := e.signIn(e.alice, addr)
		switch code {
		case 200:
			ok++
		default:
			checkTooMany(t, fmt.Sprintf("alice's sign-in %d", i), code, h)
		}
	}
	if ok != lim.SubjectBurst {
		t.Errorf("alice signed in %d times, want her burst %d", ok, lim.SubjectBurst)
	}
	// bob is still signed in and signs in again, even from alice's address.
	if !e.live(bob) {
		t.Error("alice's sign-ins ended bob's")
	}
	for _, addr := range []string{"192.0.2.1:999", "203.0.113.9:1"} {
		if code, _, ck := e.signIn(e.bob, addr); code != 200 || !e.live(ck) {
			t.Errorf("bob from %s after alice's flood: %d", addr, code)
		}
	}
	// Once her bucket refills, alice signs in again.
	c.add(lim.SubjectEvery)
	if code, _, _ := e.signIn(e.alice, "192.0.2.1:1234"); code != 200 {
		t.Errorf("alice after %s: %d", lim.SubjectEvery, code)
	}
}

func TestSignInGuessesLimitedByAddress(t *testing.T) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEnv(t, func(o *broker.Options) { o.Now = c.now })
	lim := broker.SignInLimits{}.WithDefaults()
	guess := "pyl_" + strings.Repeat("g", 43)
	for i := range lim.AddrBurst {
		if code, _, _ := e.signIn(guess, "192.0.2.66:1"); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, code)
		}
	}
	code, h, _ := e.signIn(guess, "192.0.2.66:2")
	checkTooMany(t, "a guess past the burst", code, h)
	code, h, _ = e.signIn(e.alice, "192.0.2.66:3") // the address is refused before its token is read
	checkTooMany(t, "a valid token from the guessing address", code, h)
	for _, addr := range []string{"192.0.2.67:1", "[2001:db8:0:1::1]:1"} {
		if code, _, _ := e.signIn(e.alice, addr); code != 200 {
			t.Errorf("alice from %s: %d", addr, code)
		}
	}
	// IPv6 addresses are limited by /64: one host has all of it.
	for i := range lim.AddrBurst {
		e.signIn(guess, fmt.Sprintf("[2001:db8:0:2::%x]:1", i+1))
	}
	code, h, _ = e.signIn(guess, "[2001:db8:0:2::ffff]:1")
	checkTooMany(t, "a guess from the same /64", code, h)
	// The bucket refills.
	c.add(lim.AddrEvery)
	if code, _, _ := e.signIn(e.alice, "192.0.2.66:4"); code != 200 {
		t.Errorf("alice after %s: %d", lim.AddrEvery, code)
	}
}

func TestSignInSessionCaps(t *testing.T) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	const perSubject, max = 4, 10
	e := newEnv(t, func(o *broker.Options) {
		o.Now = c.now
		o.SignIn = broker.SignInLimits{PerSubject: perSubject, MaxSessions: max}
	})
	lim := broker.SignInLimits{PerSubject: perSubject, MaxSessions: max}.WithDefaults()
	signIn := func(token string) *http.Cookie {
		t.Helper()
		c.add(lim.SubjectEvery) // past the rate limit: these tests are about the caps
		code, _, ck := e.signIn(token, "192.0.2.1:1")
		if code != 200 {
			t.Fatalf("sign-in: %d", code)
		}
		return ck
	}
	bob := signIn(e.bob)
	var alice []*http.Cookie
	for range 200 {
		alice = append(alice, signIn(e.alice))
	}
	for i, ck := range alice {
		if want := i >= len(alice)-perSubject; e.live(ck) != want {
			t.Errorf("alice's sign-in %d live: %v, want %v (the newest %d stay)", i, !want, want, perSubject)
		}
	}
	if !e.live(bob) {
		t.Errorf("alice's 200 sign-ins ended bob's")
	}
	// Past MaxSessions the oldest of all ends, whoever it is; the new one always works.
	var more []*http.Cookie
	for _, tok := range []string{e.admin, e.admin, e.admin, e.admin} {
		more = append(more, signIn(tok))
	}
	minted := make([]string, 3)
	for i := range minted {
		s, err := e.srv.CreateToken(t.Context(), broker.RoleOwner, fmt.Sprintf("user%d", i))
		if err != nil {
			t.Fatal(err)
		}
		more = append(more, signIn(s))
	}
	// Now 1 (bob) + 4 (alice) + 4 (admin) + 2 = 10 live, then the 3rd user ends bob's.
	if e.live(bob) {
		t.Errorf("bob's, the oldest sign-in, still live past %d sign-ins", max)
	}
	for i, ck := range more {
		if !e.live(ck) {
			t.Errorf("sign-in %d after the cap is not live", i)
		}
	}
	// Expired sign-ins go first.
	c.add(broker.UISessionTTL)
	if ck := signIn(e.bob); !e.live(ck) || e.live(more[len(more)-1]) {
		t.Errorf("after the TTL: new %v, old %v", e.live(ck), e.live(more[len(more)-1]))
	}
}
