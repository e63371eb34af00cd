package e2e

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBrokerSlowClients runs the real `pylayer serve` with short limits and attacks it as
// the security issue did: a body trickled a byte at a time, idle connections held open,
// more connections than the cap, oversized headers. Each is cut off, and the broker keeps
// answering everyone else.
func TestBrokerSlowClients(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	db := filepath.Join(h.home, "broker", "broker.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	url := webStartServer(t, h.command(context.Background(), t, "serve", "--listen", "127.0.0.1:0", "--db", db,
		"--read-header-timeout", "1s", "--read-timeout", "2s", "--idle-timeout", "1s", "--max-conns", "20",
		"--max-header-bytes", "4096"))
	addr := strings.TrimPrefix(url, "http://")
	dial := func(addr string) net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// closedWithin reports whether the server closes c within limit (reads until EOF).
	closedWithin := func(c net.Conn, limit time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(limit))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				ne, ok := err.(net.Error)
				return !(ok && ne.Timeout())
			}
		}
	}

	t.Run("a trickled body is cut off", func(t *testing.T) {
		c := dial(addr)
		defer c.Close()
		c.Write([]byte("POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer pyl_x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"))
		stop := make(chan struct{})
		defer close(stop)
		go func() { // a byte every 300 ms, as long as the server listens
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		if !closedWithin(c, 30*time.Second) {
			t.Error("a body trickled a byte every 300 ms was still being read after 30 s (read timeout 2 s)")
		}
	})
	t.Run("idle connections are closed", func(t *testing.T) {
		var cs []net.Conn
		for i := 0; i < 10; i++ {
			cs = append(cs, dial(addr))
		}
		for i, c := range cs {
			if !closedWithin(c, 30*time.Second) {
				t.Errorf("idle connection %d still open after 30 s (idle timeout 1 s)", i)
			}
			c.Close()
		}
	})
	t.Run("oversized headers are refused", func(t *testing.T) {
		c := dial(addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("64 KiB of headers: %d, want 431", resp.StatusCode)
		}
	})
	t.Run("past the connection cap, others are refused, and served again after", func(t *testing.T) {
		// The held connections never finish their headers. On the server above its 1 s header
		// timeout would close some of them while a busy machine is still dialling the rest,
		// and free a slot for the extra one; so this cap is tested on a server of its own
		// whose header timeout cannot run out while the test holds them.
		db := filepath.Join(h.home, "broker", "cap.db")
		url := webStartServer(t, h.command(context.Background(), t, "serve", "--listen", "127.0.0.1:0", "--db", db,
			"--read-header-timeout", "10m", "--max-conns", "20"))
		addr := strings.TrimPrefix(url, "http://")
		var held []net.Conn
		for i := 0; i < 20; i++ {
			c := dial(addr)
			c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")) // headers never finished
			held = append(held, c)
		}
		extra := dial(addr)
		extra.SetDeadline(time.Now().Add(30 * time.Second))
		extra.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
		if err == nil {
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a connection past the cap: %d, want 503 or a refusal", resp.StatusCode)
		}
		extra.Close()
		for _, c := range held {
			c.Close()
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(url + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the broker did not answer again after the connections closed: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
