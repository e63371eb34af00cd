package index

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// tailRequest is the size of the first range request, the end of the wheel: it holds the
// end of central directory record and, for most wheels, the whole central directory and
// the METADATA member too (wheel builders write the .dist-info last).
const tailRequest = 128 << 10

// rangeAnswer is a checked 206 answer: bytes [start, start+len(body)) of a total-byte file.
type rangeAnswer struct {
	start, total int64
	body         []byte
}

// rangeMetadata reads f's METADATA with range requests. A server that answers the first
// one with the whole file (200) hands back its response, to be read as a download; every
// other refusal, and a zip the range reader does not accept, is errNoRangeRead.
func (c *Client) rangeMetadata(ctx context.Context, f File) ([]byte, *http.Response, error) {
	limit := c.opts.maxBodyBytes
	first, whole, err := c.getRange(ctx, f, -tailRequest, 0, 0)
	if whole != nil {
		return nil, whole, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("metadata of %s: %w", f.Filename, err)
	}
	if first.start == 0 {
		// The whole file came: check it like a download and read it like one.
		if int64(len(first.body)) != first.total || f.Size > 0 && first.total != f.Size {
			return nil, nil, noRange("the whole-file range answer has %d bytes", len(first.body))
		}
		if sum := sha256.Sum256(first.body); hex.EncodeToString(sum[:]) != f.SHA256 {
			return nil, nil, noRange("the whole-file range answer does not have the index's sha256")
		}
		md, err := zipFileMetadata(f, bytes.NewReader(first.body), first.total, limit)
		if err == nil {
			c.learnSize(f, first.total)
		}
		return md, nil, err
	}
	v := &zipView{size: first.total, start: first.start, tail: first.body, budget: 2*limit + 1<<20,
		fetch: func(ctx context.Context, off, end int64) ([]byte, error) {
			a, whole, err := c.getRange(ctx, f, off, end-1, first.total)
			if whole != nil {
				whole.Body.Close()
				return nil, noRange("a later range request was answered with the whole file")
			}
			return a.body, err
		}}
	md, err := zipMetadata(ctx, v, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata of %s: %w", f.Filename, err)
	}
	c.learnSize(f, first.total)
	return md, nil, nil
}

// getRange asks for bytes first-last of f (with first < 0, its last -first bytes) and
// checks the answer: a 206 with a Content-Range for exactly that range of a file of the
// size the index gives (or total, when not 0), as many body bytes, and Accept-Ranges:
// bytes. A 200 is returned as a response for the caller to read and close; 401, 403, 404
// and 410 are *HTTPError; any other answer is errNoRangeRead.
func (c *Client) getRange(ctx context.Context, f File, first, last, total int64) (rangeAnswer, *http.Response, error) {
	spec := fmt.Sprintf("bytes=%d-%d", first, last)
	if first < 0 {
		spec = fmt.Sprintf("bytes=%d", first)
	}
	resp, err := c.getWith(ctx, f.URL, func(h http.Header) {
		h.Set("Range", spec)
		// Ranges of an encoded body would be ranges of the encoding, and the transport
		// would try to decode a fragment: ask for the file's own bytes.
		h.Set("Accept-Encoding", "identity")
	})
	if err != nil {
		return rangeAnswer{}, nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return rangeAnswer{}, resp, nil
	case http.StatusPartialContent:
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusGone:
		resp.Body.Close()
		return rangeAnswer{}, nil, httpError(resp)
	default:
		resp.Body.Close()
		return rangeAnswer{}, nil, noRange("%s answered %q to Range: %s", redactURL(resp.Request.URL), resp.Status, spec)
	}
	defer resp.Body.Close()
	a, err := c.checkRange(resp, f, first, last, total)
	if err != nil {
		return rangeAnswer{}, nil, noRange("%s answered Range: %s with %v", redactURL(resp.Request.URL), spec, err)
	}
	return a, nil, nil
}

func (c *Client) checkRange(resp *http.Response, f File, first, last, total int64) (rangeAnswer, error) {
	if !hasToken(resp.Header.Values("Accept-Ranges"), "bytes") {
		return rangeAnswer{}, errors.New("a 206 without Accept-Ranges: bytes")
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return rangeAnswer{}, fmt.Errorf("a body with content coding %q", ce)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); strings.HasPrefix(mt, "multipart/") {
		return rangeAnswer{}, errors.New("a multipart answer to a single range")
	}
	start, end, size, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil {
		return rangeAnswer{}, err
	}
	switch {
	case size > c.opts.maxFileBytes:
		return rangeAnswer{}, fmt.Errorf("a %d-byte file, over the %d-byte cap", size, c.opts.maxFileBytes)
	case f.Size > 0 && size != f.Size:
		return rangeAnswer{}, fmt.Errorf("a %d-byte file, the index says %d", size, f.Size)
	case total > 0 && size != total:
		return rangeAnswer{}, fmt.Errorf("a %d-byte file, an earlier answer said %d (it changed?)", size, total)
	case first < 0 && (start != max(size+first, 0) || end != size-1):
		return rangeAnswer{}, fmt.Errorf("bytes %d-%d of %d, not its last %d", start, end, size, -first)
	case first >= 0 && (start != first || end != last):
		return rangeAnswer{}, fmt.Errorf("bytes %d-%d, not %d-%d", start, end, first, last)
	}
	n := end - start + 1
	if resp.ContentLength >= 0 && resp.ContentLength != n {
		return rangeAnswer{}, fmt.Errorf("a length of %d for %d bytes", resp.ContentLength, n)
	}
	body, err := readCapped(resp.Body, n)
	if err != nil {
		return rangeAnswer{}, scrubURLError(err)
	}
	if int64(len(body)) != n {
		return rangeAnswer{}, fmt.Errorf("%d body bytes for %d", len(body), n)
	}
	return rangeAnswer{start: start, total: size, body: body}, nil
}

// parseContentRange parses "bytes FIRST-LAST/SIZE" (RFC 9110), with FIRST <= LAST < SIZE.
func parseContentRange(s string) (first, last, size int64, err error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	r, sz, ok2 := strings.Cut(rest, "/")
	a, b, ok3 := strings.Cut(r, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, 0, fmt.Errorf("a malformed content range %q", s)
	}
	var nums [3]int64
	for i, d := range []string{a, b, sz} {
		if d == "" || len(d) > 18 || strings.Trim(d, "0123456789") != "" {
			return 0, 0, 0, fmt.Errorf("a malformed content range %q", s)
		}
		nums[i], _ = strconv.ParseInt(d, 10, 64)
	}
	first, last, size = nums[0], nums[1], nums[2]
	if first > last || last >= size {
		return 0, 0, 0, fmt.Errorf("a malformed content range %q", s)
	}
	return first, last, size, nil
}

// hasToken reports whether a comma-separated header holds tok (case-insensitive).
func hasToken(values []string, tok string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), tok) {
				return true
			}
		}
	}
	return false
}
