package registrytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
)

// Request is one request the registry answered, from its JSON log.
type Request struct {
	Method  string // "GET", "HEAD", "PUT", ...
	Path    string // the request URI as sent: path, and "?query" when there was one
	Status  int    // HTTP status
	Written int64  // response body bytes written (http.response.written; 0 for 401s, which distribution logs without it)
}

// logEntry is the part of a distribution JSON log line that describes a served request.
// Lines without http.response.status (startup, warnings) are not requests.
type logEntry struct {
	Msg     string          `json:"msg"`
	Method  string          `json:"http.request.method"`
	URI     string          `json:"http.request.uri"`
	Status  json.RawMessage `json:"http.response.status"`
	Written json.RawMessage `json:"http.response.written"`
}

// authChallenge starts the warning distribution logs, instead of "response completed",
// when htpasswd auth answers 401.
const authChallenge = "error authorizing context: basic authentication challenge"

// maxLogLine bounds one log line; longer lines are not requests and are skipped.
const maxLogLine = 1 << 20

// parseLog reads distribution's JSON log ("response completed" and "response completed
// with error" lines, and the auth challenge warnings of 401s) into requests, in log order. Other lines (not JSON, not a request, an
// unfinished last line) are skipped: the log also carries startup messages and the
// registry may be in the middle of writing. It fails only if reading fails.
func parseLog(r io.Reader) ([]Request, error) {
	var reqs []Request
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			return reqs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the registry log: %w", err)
		}
		if req, ok := parseLine(line); ok {
			reqs = append(reqs, req)
		}
	}
}

// readLine returns the next complete line without its newline, skipping lines longer than
// maxLogLine; an unterminated last line reads as io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > maxLogLine {
				tooLong, line = true, nil
			}
		}
		switch {
		case err == nil && tooLong:
			tooLong = false // skip this line, go on with the next one
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			return nil, err
		}
	}
}

func parseLine(line []byte) (Request, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return Request{}, false
	}
	var e logEntry
	if json.Unmarshal(line, &e) != nil || e.Method == "" || e.URI == "" {
		return Request{}, false
	}
	if strings.HasPrefix(e.Msg, authChallenge) {
		// Rejected by htpasswd: logged as a warning without status or size.
		return Request{Method: e.Method, Path: e.URI, Status: 401}, true
	}
	if !strings.HasPrefix(e.Msg, "response completed") {
		return Request{}, false
	}
	status, err := strconv.Atoi(string(e.Status))
	if err != nil || status < 100 || status > 999 {
		return Request{}, false
	}
	written := int64(0)
	if len(e.Written) > 0 {
		if written, err = strconv.ParseInt(string(e.Written), 10, 64); err != nil || written < 0 {
			return Request{}, false
		}
	}
	return Request{Method: e.Method, Path: e.URI, Status: status, Written: written}, true
}

// syncParam marks the barrier requests that Requests and ResetLog send; they never appear
// in results.
const syncParam = "pylayer-sync"

// Requests returns the requests the registry answered since Start or the last ResetLog,
// in log order. The registry logs a request just after answering it, so Requests first
// sends a marked request of its own and waits until that one is in the log: everything
// answered before the call is then there too.
func (r *Registry) Requests() []Request {
	reqs, _, err := r.readLog()
	if err != nil {
		r.fatalf("reading the registry log: %v", err)
	}
	return reqs
}

// ResetLog makes later calls of Requests, BlobGETs and BytesServed count from now on.
func (r *Registry) ResetLog() {
	_, end, err := r.readLog()
	if err != nil {
		r.fatalf("reading the registry log: %v", err)
	}
	r.mu.Lock()
	if end > r.logOff {
		r.logOff = end
	}
	r.mu.Unlock()
}

// BlobGETs counts GET requests (whatever their status) for blob d in any repository.
func (r *Registry) BlobGETs(d digest.Digest) int {
	suffix := "/blobs/" + d.String()
	n := 0
	for _, q := range r.Requests() {
		path, _, _ := strings.Cut(q.Path, "?")
		if q.Method == http.MethodGet && strings.HasPrefix(path, "/v2/") && strings.HasSuffix(path, suffix) {
			n++
		}
	}
	return n
}

// BytesServed sums the response bytes of every request.
func (r *Registry) BytesServed() int64 {
	var n int64
	for _, q := range r.Requests() {
		n += q.Written
	}
	return n
}

// readLog sends a barrier request, waits until the log shows it, and returns the requests
// after the ResetLog mark (barriers left out) and the log offset just past the barrier.
func (r *Registry) readLog() ([]Request, int64, error) {
	r.mu.Lock()
	r.syncN++
	marker := fmt.Sprintf("/v2/?%s=%d", syncParam, r.syncN)
	off := r.logOff
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.barrier(ctx, marker); err != nil {
		return nil, 0, err
	}
	for {
		reqs, end, found, err := r.scanLog(off, marker)
		if err != nil {
			return nil, 0, err
		}
		if found {
			return reqs, end, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("barrier request %s never showed up in %s", marker, r.logPath)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// barrier sends GET marker with the registry's credentials.
func (r *Registry) barrier(ctx context.Context, marker string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Scheme()+"://"+r.Host+marker, nil)
	if err != nil {
		return err
	}
	if r.User != "" {
		req.SetBasicAuth(r.User, r.Password)
	}
	tr := r.Transport()
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("barrier request: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("barrier request: status %d", resp.StatusCode)
	}
	return nil
}

// scanLog parses the log from off, up to and including the line of marker if it is there.
// The end offset is just past the last complete line read.
func (r *Registry) scanLog(off int64, marker string) (reqs []Request, end int64, found bool, err error) {
	f, err := os.Open(r.logPath)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, 0, false, err
	}
	cr := &countingReader{r: f}
	all, err := parseLog(cr)
	if err != nil {
		return nil, 0, false, err
	}
	for _, q := range all {
		if q.Path == marker {
			found = true
		}
		if !strings.Contains(q.Path, syncParam+"=") {
			reqs = append(reqs, q)
		}
	}
	return reqs, off + cr.completeLines, found, nil
}

// countingReader remembers how far the complete lines it has delivered reach.
type countingReader struct {
	r             io.Reader
	n             int64
	completeLines int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
		c.completeLines = c.n + int64(i) + 1
	}
	c.n += int64(n)
	return n, err
}

// fatalf reports a harness failure: through the test when there is one, else by panicking
// (a registry from New, used from TestMain).
func (r *Registry) fatalf(format string, args ...any) {
	if r.tb != nil {
		r.tb.Helper()
		r.tb.Fatalf(format, args...)
	}
	panic(fmt.Sprintf(format, args...))
}
