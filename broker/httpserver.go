package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPLimits bound what one client can hold of the server: how long a request may take to
// arrive and its answer to leave, how long an idle connection stays, how big the headers
// are and how many connections are open at once. Zero fields get the defaults below. Long
// polls (GET /v1/requests/{id}?wait=) get their wait on top of the write timeout; a wheel
// upload gets UploadTimeout for its body instead of ReadTimeout. The time the broker
// itself works on a request is not the client's and is bounded by neither (see answering).
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration // the request line and headers; default 10s
	ReadTimeout       time.Duration // the whole request, body included, to arrive; default 30s
	WriteTimeout      time.Duration // the answer to leave, once it starts; default 30s
	IdleTimeout       time.Duration // a keep-alive connection between requests; default 60s
	UploadTimeout     time.Duration // the body of a wheel upload; default 10m
	MaxHeaderBytes    int           // default 64 KiB
	MaxConns          int           // open connections; past it a connection is answered 503 and closed; default 1024
}

// Default HTTP limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultUploadTimeout     = 10 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 1024
)

func (l HTTPLimits) withDefaults() HTTPLimits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.UploadTimeout, DefaultUploadTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// HTTPServer returns an http.Server that serves s with the timeouts and header limit of
// Options.HTTP; its errors (bad TLS, refused headers) go to the server's logger at warn.
// Serve it on a listener wrapped with LimitListener, or call Serve, which does both.
func (s *Server) HTTPServer() *http.Server {
	l := s.o.HTTP
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// ShutdownGrace is how long Serve waits for requests in flight when its context ends.
const ShutdownGrace = 10 * time.Second

// Serve serves s on ln, capped at Options.HTTP.MaxConns connections, until ctx ends; it then
// stops accepting, wakes long polls and waits up to ShutdownGrace for requests in flight.
// It returns nil after a shutdown that completed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := s.HTTPServer()
	hs.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(LimitListener(ln, s.o.HTTP.MaxConns)) }()
	fctx, stopFollow := context.WithCancel(ctx)
	followed := s.followFeed(fctx)
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		if s.o.AuditRetention > 0 {
			s.pruneAudit(fctx)
		}
	}()
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		s.sweepClassifying(fctx)
	}()
	defer func() { stopFollow(); <-followed; <-pruned; <-swept; s.Close() }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	s.stopping.Store(true)
	s.waiters.notifyAll() // long polls answer now instead of holding the shutdown
	err := hs.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("shutting down the broker: %w", err)
	}
	return nil
}

// Close stops the server's background work (the classification of asynchronous
// requests, which a sweep takes up again later) and waits for it. Serve closes the
// server when it returns; a server used only as an http.Handler should be closed when
// done. A request left classifying is classified by the next server's sweep.
func (s *Server) Close() {
	s.bg.Close(true)
}

// maxRefusing bounds the connections being answered 503 at once; past it they are closed
// without an answer.
const maxRefusing = 64

// refusalLinger is how long a refused connection is given to read its 503.
const refusalLinger = time.Second

// LimitListener returns a listener that holds at most n connections open at once. A
// connection past the cap is accepted, answered "503 Service Unavailable" (JSON, with
// Retry-After) and closed, so a client learns why instead of hanging in the backlog. n <= 0
// means DefaultMaxConns.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		n = DefaultMaxConns
	}
	return &limitListener{Listener: ln, max: int64(n), refusing: make(chan struct{}, maxRefusing)}
}

type limitListener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	refusing chan struct{} // a semaphore of refusals in flight
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitConn{Conn: c, release: func() { l.open.Add(-1) }}, nil
		}
		l.open.Add(-1)
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				refuse(c, l.max)
			}()
		default:
			c.Close()
		}
	}
}

// refuse answers a connection over the cap with 503 and closes it. It reads what the
// client sent for a moment after answering, so the close does not reset the connection
// before the client has read the answer.
func refuse(c net.Conn, max int64) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refusalLinger))
	body := fmt.Sprintf(`{"error": "the broker has %d connections open, its limit", "hint": "retry in a second; close idle connections"}`+"\n", max)
	_, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// limitConn gives its slot back once, on the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// The timeouts bound the client, not the broker: ReadTimeout (UploadTimeout for a wheel)
// is how long a request may take to arrive, WriteTimeout how long its answer may take to
// leave once it starts. The time the broker spends on a request in between (resolving and
// fetching wheels, rebasing, waiting in a long poll) is its own. net/http already stops
// the read deadline once a request has arrived; its write deadline, though, is set when
// the headers arrive, and would fail the answer of any request slower than WriteTimeout.
// So the server sets it again when the answer starts (statusWriter).

// answering starts the write timeout: the answer has d to leave, from now.
func answering(w http.ResponseWriter, d time.Duration) {
	if d > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	}
}

// extendDeadlines gives the request more time, from now, to arrive (read) and to be
// answered (write): a long poll gets its wait on top of both, an upload's body gets the
// upload timeout. A zero duration leaves that deadline alone. It is a no-op where the
// connection cannot say (a recorder in tests).
func extendDeadlines(w http.ResponseWriter, read, write time.Duration) {
	rc := http.NewResponseController(w)
	now := time.Now()
	if read > 0 {
		_ = rc.SetReadDeadline(now.Add(read))
	}
	if write > 0 {
		_ = rc.SetWriteDeadline(now.Add(write))
	}
}

// errTimeout reports whether err is a read that hit its deadline.
func errTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
