package broker

import (
	"container/list"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SignInLimits bound the web page's sign-ins so that no one, however often they sign in,
// locks anyone else out: a subject keeps at most PerSubject live sign-ins and the broker
// at most MaxSessions (past either, the oldest ends), and sign-in attempts are
// rate-limited by token buckets per client address (attempts whose token does not sign in
// as an owner or admin: guesses, checked before the token is looked up) and per subject
// (sign-ins with a valid token), answering 429 with Retry-After. Zero fields get the
// defaults.
type SignInLimits struct {
	PerSubject   int           // default 16
	MaxSessions  int           // default 10000
	AddrBurst    int           // failed attempts per client address (IPv6: per /64) at once; default 30
	AddrEvery    time.Duration // one more failed attempt per address every; default 10s
	SubjectBurst int           // sign-ins per subject at once; default 10
	SubjectEvery time.Duration // one more sign-in per subject every; default 30s
}

func (l SignInLimits) withDefaults() SignInLimits {
	if l.PerSubject <= 0 {
		l.PerSubject = 16
	}
	if l.MaxSessions <= 0 {
		l.MaxSessions = 10000
	}
	if l.AddrBurst <= 0 {
		l.AddrBurst = 30
	}
	if l.AddrEvery <= 0 {
		l.AddrEvery = 10 * time.Second
	}
	if l.SubjectBurst <= 0 {
		l.SubjectBurst = 10
	}
	if l.SubjectEvery <= 0 {
		l.SubjectEvery = 30 * time.Second
	}
	return l
}

// maxLimiterKeys bounds the buckets each sign-in limiter keeps.
const maxLimiterKeys = 100_000

// uiSession is one sign-in of the web page.
type uiSession struct {
	id      string
	hash    string // the token's hash: the token is looked up again on every request
	subject string
	csrf    string
	expires time.Time

	all, mine *list.Element // in uiState.order and uiState.bySubject[subject]
}

// uiState holds the page's sign-ins, oldest first overall and per subject, the sign-in
// rate limits and a change counter the page polls.
type uiState struct {
	lim             SignInLimits
	addrs, subjects *limiter

	mu        sync.Mutex
	sessions  map[string]*uiSession
	order     *list.List // of *uiSession
	bySubject map[string]*list.List

	version atomic.Int64
}

func newUIState(l SignInLimits) *uiState {
	return &uiState{lim: l, sessions: map[string]*uiSession{}, order: list.New(), bySubject: map[string]*list.List{},
		addrs:    newLimiter(l.AddrBurst, l.AddrEvery, maxLimiterKeys),
		subjects: newLimiter(l.SubjectBurst, l.SubjectEvery, maxLimiterKeys)}
}

// remove ends a sign-in. u.mu is held.
func (u *uiState) remove(se *uiSession) {
	delete(u.sessions, se.id)
	u.order.Remove(se.all)
	if l := u.bySubject[se.subject]; l != nil {
		l.Remove(se.mine)
		if l.Len() == 0 {
			delete(u.bySubject, se.subject)
		}
	}
}

// add keeps se, first ending expired sign-ins, then the subject's oldest past PerSubject
// and the broker's oldest past MaxSessions.
func (u *uiState) add(se *uiSession, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for e := u.order.Front(); e != nil; e = u.order.Front() { // TTLs are equal: oldest expire first
		old := e.Value.(*uiSession)
		if !now.After(old.expires) {
			break
		}
		u.remove(old)
	}
	for l := u.bySubject[se.subject]; l != nil && l.Len() >= u.lim.PerSubject; l = u.bySubject[se.subject] {
		u.remove(l.Front().Value.(*uiSession))
	}
	for u.order.Len() >= u.lim.MaxSessions {
		u.remove(u.order.Front().Value.(*uiSession))
	}
	mine := u.bySubject[se.subject]
	if mine == nil {
		mine = list.New()
		u.bySubject[se.subject] = mine
	}
	se.all, se.mine = u.order.PushBack(se), mine.PushBack(se)
	u.sessions[se.id] = se
}

// get returns a copy of the live sign-in id, ending it if it has expired.
func (u *uiState) get(id string, now time.Time) (uiSession, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	se, ok := u.sessions[id]
	if !ok {
		return uiSession{}, false
	}
	if now.After(se.expires) {
		u.remove(se)
		return uiSession{}, false
	}
	return *se, true
}

// clientKey is what sign-ins are limited by per client: the address, or its /64 for IPv6
// (one host gets a whole /64). Proxy headers are not trusted.
func clientKey(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// tooMany answers 429 with Retry-After.
func tooMany(w http.ResponseWriter, wait time.Duration, msg string) {
	sec := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(max(sec, 1)))
	writeError(w, http.StatusTooManyRequests, msg, fmt.Sprintf("wait %d s and sign in again; signed-in pages stay signed in", max(sec, 1)))
}
