package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/pylayer/pylayer/broker/postgres/pgtest"
)

// A network lab for the real-hosts suite: network namespaces the test makes, one per
// host, each with a veth on one private /24 whose other end is a port of a bridge in a hub
// namespace. The test binary itself (the operator: publishing, minting tokens, reading the
// database) reaches the hosts through one more veth, its end in the root namespace. No
// route leads anywhere but that /24: nothing the hosts send can leave the machine.
//
// Names carry the test binary's pid (plh<PID>-<host>, root veth plh<PID>), so a lab a
// killed run left behind is recognised by its dead pid and swept at the next start.

// labNet is the lab's /24 (the first three octets); labOps is the operator's address.
const (
	labNet = "10.231.0"
	labOps = labNet + ".254"
)

// netLab is a set of network namespaces on one bridge.
type netLab struct {
	t       testing.TB
	prefix  string // plh<PID>
	ip      string // path of ip(8)
	nsenter string
	setpriv string
	hosts   map[string]string // host name → its address
}

// newNetLab makes the hub, the operator's veth and one namespace per host (name → last
// octet) and removes all of them when the test ends, whatever its outcome. It fails the
// test, never skips it, without root or iproute2.
func newNetLab(t *testing.T, hosts map[string]int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the real-hosts suite makes network namespaces: run it as root (the e2e tier is root's)")
	}
	l := &netLab{t: t, prefix: fmt.Sprintf("plh%d", os.Getpid()), hosts: map[string]string{}}
	for _, tool := range []struct {
		p    *string
		name string
		pkg  string
	}{{&l.ip, "ip", "iproute2"}, {&l.nsenter, "nsenter", "util-linux"}, {&l.setpriv, "setpriv", "util-linux"}} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			t.Fatalf("%s is missing: install Debian's %s (`make deps`); the real-hosts suite needs it to make network namespaces", tool.name, tool.pkg)
		}
		*tool.p = p
	}
	l.sweep()
	if out := l.must("-o", "-4", "addr", "show", "to", labNet+".0/24"); out != "" {
		t.Fatalf("%s.0/24 is already in use on this machine, the lab needs it to itself:\n%s", labNet, out)
	}
	t.Cleanup(l.remove) // registered first: it runs after every process of the test has stopped
	hub := l.ns("hub")
	l.must("netns", "add", hub)
	l.must("-n", hub, "link", "add", "br0", "type", "bridge")
	l.must("-n", hub, "link", "set", "br0", "up")
	for name, octet := range hosts {
		ns := l.ns(name)
		addr := fmt.Sprintf("%s.%d", labNet, octet)
		l.must("netns", "add", ns)
		l.must("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "v-"+name, "netns", hub)
		l.must("-n", hub, "link", "set", "v-"+name, "master", "br0", "up")
		l.must("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		l.must("-n", ns, "link", "set", "eth0", "up")
		l.must("-n", ns, "link", "set", "lo", "up")
		l.hosts[name] = addr
	}
	l.must("link", "add", l.prefix, "type", "veth", "peer", "name", "v-ops", "netns", hub)
	l.must("-n", hub, "link", "set", "v-ops", "master", "br0", "up")
	l.must("addr", "add", labOps+"/24", "dev", l.prefix)
	l.must("link", "set", l.prefix, "up")
	return l
}

// ns is the namespace name of a host.
func (l *netLab) ns(host string) string { return l.prefix + "-" + host }

// addr is a host's address in the lab.
func (l *netLab) addr(host string) string {
	a, ok := l.hosts[host]
	if !ok {
		l.t.Fatalf("the lab has no host %q", host)
	}
	return a
}

// must runs ip with args and fails the test unless it succeeds; it returns stdout.
func (l *netLab) must(args ...string) string {
	l.t.Helper()
	out, err := l.ipRun(args...)
	if err != nil {
		l.t.Fatal(err)
	}
	return out
}

func (l *netLab) ipRun(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(l.ip, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ip %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// remove kills what still runs in the lab's namespaces and deletes them and the
// operator's veth; the veths of the hosts go with their namespaces. It checks that
// nothing of the lab is left.
func (l *netLab) remove() {
	l.removePrefix(l.prefix)
	if out, _ := l.ipRun("netns", "list"); strings.Contains(out, l.prefix+"-") {
		l.t.Errorf("network namespaces left after the lab's removal:\n%s", out)
	}
	if _, err := l.ipRun("link", "show", l.prefix); err == nil {
		l.t.Errorf("veth %s left after the lab's removal", l.prefix)
	}
}

func (l *netLab) removePrefix(prefix string) {
	out, _ := l.ipRun("netns", "list")
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, prefix+"-") {
			continue
		}
		pids, _ := l.ipRun("netns", "pids", name)
		for _, f := range strings.Fields(pids) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if _, err := l.ipRun("netns", "del", name); err != nil {
			l.t.Errorf("removing network namespace %s: %v", name, err)
		}
	}
	l.ipRun("link", "del", prefix) // gone already when its peer's namespace went
}

// sweep removes the labs of test binaries that died without cleaning up (their pid is
// gone), so that a killed run does not make the next one fail on a taken /24.
func (l *netLab) sweep() {
	out, _ := l.ipRun("netns", "list")
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		p, _, ok := strings.Cut(name, "-")
		pid, err := strconv.Atoi(strings.TrimPrefix(p, "plh"))
		if !ok || !strings.HasPrefix(p, "plh") || err != nil || seen[p] {
			continue
		}
		seen[p] = true
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			l.t.Logf("removing the lab %s of a test binary that is gone", p)
			l.removePrefix(p)
		}
	}
}

// wrap makes cmd run in a host's namespace: nsenter joins it and execs the command, so
// the child's pid (and Pdeathsig) stay those of the command itself.
func (l *netLab) wrap(cmd *exec.Cmd, host string) *exec.Cmd {
	cmd.Args = append([]string{"nsenter", "--net=/run/netns/" + l.ns(host), "--", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = l.nsenter
	return cmd
}

// prefix is the argv prefix that runs a command in a host's namespace.
func (l *netLab) argv(host string) []string {
	return []string{l.nsenter, "--net=/run/netns/" + l.ns(host), "--"}
}

// httpClient is an HTTP client whose connections are made in a host's namespace, for
// calls the test makes as that host: each dial runs on an OS thread of its own that joins
// the namespace for the dial (a socket stays in the namespace it was made in) and returns
// to its own before the runtime may use it again.
func (l *netLab) httpClient(host string) *http.Client {
	nsPath := "/run/netns/" + l.ns(host)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread()
			// The thread goes back to the runtime only once it is back in its own
			// namespace; if that fails it stays locked and ends with this goroutine.
			self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
			if err != nil {
				ch <- res{err: err}
				return
			}
			defer self.Close()
			f, err := os.Open(nsPath)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- res{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- res{err: fmt.Errorf("joining %s: %w", nsPath, err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			ch <- res{c, err}
		}()
		select {
		case r := <-ch:
			return r.c, r.err
		case <-ctx.Done():
			go func() {
				if r := <-ch; r.c != nil {
					r.c.Close()
				}
			}()
			return nil, ctx.Err()
		}
	}
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: dial, MaxIdleConnsPerHost: 4}}
}

// startServerIn starts cmd in a host's namespace like startServer, and fails the test
// unless it printed want (its URL on the lab's address).
func (l *netLab) startServerIn(t testing.TB, cmd *exec.Cmd, host, want string) *child {
	t.Helper()
	c, url, ok, err := startChild(l.wrap(cmd, host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(10 * time.Second) })
	if !ok || url != want {
		t.Fatalf("%v printed %q, want %s; stderr:\n%s", cmd.Args, url, want, cmd.Stderr)
	}
	return c
}

// startPostgres initdb's a cluster and runs PostgreSQL on the database host, listening
// on its lab address only and trusting the lab's /24; it returns the URL of a database
// made for the test. pgtest's shared server stays what it is for the other suites: this
// is a server of its own, started from the same Debian binaries.
func (l *netLab) startPostgres(ctx context.Context, t testing.TB, host string) string {
	t.Helper()
	bin, err := pgtest.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("the postgres system user (Debian's postgresql package) runs the database host: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "pylayer-hosts-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(hba, "host all all %s.0/24 trust\n", labNet)
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	addr := l.addr(host)
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// setpriv drops to postgres after nsenter joined the namespace (which needs root) and
	// sets the parent-death signal afterwards (a uid change clears it).
	argv := append(l.argv(host), l.setpriv, "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", "--pdeathsig=SIGQUIT", "--",
		filepath.Join(bin, "postgres"), "-D", data, "-h", addr, "-p", "5432", "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=100")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting postgres on the database host: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	// Ready when it answers from the operator's side of the lab.
	url := fmt.Sprintf("postgres://postgres@%s:5432/%%s?sslmode=disable", addr)
	deadline := time.Now().Add(time.Minute)
	for {
		err := psql(ctx, fmt.Sprintf(url, "postgres"), "CREATE DATABASE pylayer")
		if err == nil {
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("postgres on the database host exited: %v\n%s", err, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("postgres on %s did not accept connections within a minute: %v\n%s", addr, err, b)
		}
		time.Sleep(20 * time.Millisecond) // polling the condition: postgres accepts
	}
	return fmt.Sprintf(url, "pylayer")
}

// psql runs one statement on the database at url.
func psql(ctx context.Context, url, stmt string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, stmt)
	return err
}
