// Package pgtest runs a real PostgreSQL for tests: Debian's server binaries (the
// postgresql package, which `make deps` installs), a cluster initdb'd into a temporary
// directory as an unprivileged user (the postgres system user when the tests run as
// root), listening on 127.0.0.1 on a free port with its unix socket in that directory.
// One server is shared by a test binary and each test gets a database of its own:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestX(t *testing.T) { dsn := pgtest.DSN(t); ... }
//
// DSN skips its test in the -short tier (internal/testenv.Integration) and fails it when
// the binaries are missing. It imports testing: import it only from _test.go files.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pylayer/pylayer/internal/testenv"
)

// Server is a running PostgreSQL cluster.
type Server struct {
	dir  string // the cluster's directory: data/, the socket, the log
	port int
	cmd  *exec.Cmd
	exit chan struct{} // closed when the server process has exited
	err  error         // its exit status, once exit is closed
	log  string
	n    atomic.Int64
}

// BinDir finds the server binaries: $PG_BINDIR, else the newest
// /usr/lib/postgresql/*/bin (Debian's layout).
func BinDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d, nil
	}
	ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(ds, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(ds[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(ds[j])))
		return vi < vj
	})
	for i := len(ds) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(ds[i], "postgres")); err == nil {
			return ds[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: run `make deps` (Debian's postgresql package), or set PG_BINDIR")
}

// credential is who runs initdb and postgres: the caller unless it is root (which
// PostgreSQL refuses), else the postgres system user, else nobody.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root and there is neither a postgres nor a nobody user to run PostgreSQL as")
}

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start initdb's a cluster into a new temporary directory and starts it, returning once
// it accepts connections (or ctx ends). Stop it with Stop.
func Start(ctx context.Context) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	attr := &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	var out bytes.Buffer
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"),
		"-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Stdout, initdb.Stderr, initdb.SysProcAttr, initdb.Dir = &out, &out, attr, dir
	if err := initdb.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out.String())
	}
	s := &Server{dir: dir, exit: make(chan struct{}), log: filepath.Join(dir, "postgres.log")}
	if s.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logf, err := os.Create(s.log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	// fsync off: a test cluster need not survive a power cut, and it is much faster.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(dir, "data"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	s.cmd.Stdout, s.cmd.Stderr, s.cmd.SysProcAttr, s.cmd.Dir = logf, logf, attr, dir
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exit) }()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls a connection until one succeeds, the server exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-s.exit:
			logb, _ := os.ReadFile(s.log)
			return fmt.Errorf("postgres exited before accepting connections (%v):\n%s", s.err, logb)
		case <-ctx.Done():
			logb, _ := os.ReadFile(s.log)
			return fmt.Errorf("postgres did not accept connections: %w (last: %v)\n%s", ctx.Err(), err, logb)
		case <-tick.C:
		}
	}
}

// URL is the connection URL of database db, over TCP on 127.0.0.1.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// SocketDir is the directory of the server's unix socket.
func (s *Server) SocketDir() string { return s.dir }

// CreateDatabase creates a new, empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), s.n.Add(1))
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return s.URL(name), nil
}

// DropDatabase drops a database made by CreateDatabase, closing its connections.
func (s *Server) DropDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{cfg.Database}.Sanitize()+" WITH (FORCE)")
	return err
}

// Stop shuts the server down (fast shutdown: SIGINT), waits for it and removes its
// directory.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exit:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.exit
		}
	}
	os.RemoveAll(s.dir)
}

var shared struct {
	once sync.Once
	s    *Server
	err  error
}

// Shared returns the test binary's server, starting it at the first call. It skips t in
// the -short tier.
func Shared(t testing.TB) *Server {
	t.Helper()
	testenv.Integration(t, "PostgreSQL (Debian's postgresql package)")
	shared.once.Do(func() { shared.s, shared.err = Start(context.Background()) })
	if shared.err != nil {
		t.Fatalf("starting PostgreSQL: %v", shared.err)
	}
	return shared.s
}

// DSN returns the URL of a new, empty database on the shared server, dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	url, err := s.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropDatabase(context.Background(), url); err != nil {
			t.Errorf("dropping the test database: %v", err)
		}
	})
	return url
}

// Main runs the tests and stops the shared server, if one was started.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.s != nil {
		shared.s.Stop()
	}
	return code
}
