package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// TestWireError: an unexpected answer is an *Error carrying the status and the
// registry's error codes, matched with errors.As; 404 and 401 stay sentinels.
func TestWireError(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	var status int
	var body any
	s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/manifests/") {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
		return true
	})
	r := openRepo(t, s, "team/errors", quick())
	desc := v1.Descriptor{Digest: digest.FromString("m"), Size: 1}
	many := make([]map[string]string, 50)
	for i := range many {
		many[i] = map[string]string{"code": "DENIED", "message": strings.Repeat("m", 500)}
	}
	for _, tc := range []struct {
		name      string
		status    int
		body      any
		code      string
		temporary bool
		codes     int
	}{
		{"invalid", http.StatusBadRequest, map[string]any{"errors": []map[string]string{{"code": "MANIFEST_INVALID", "message": "manifest invalid"}, {"code": "UNSUPPORTED", "message": "no"}}}, "MANIFEST_INVALID", false, 2},
		{"not json", http.StatusTeapot, "short and stout", "", false, 0},
		{"too many codes", http.StatusBadRequest, map[string]any{"errors": many}, "DENIED", false, maxErrorCodes},
		{"busy", http.StatusServiceUnavailable, map[string]any{"errors": []map[string]string{{"code": "UNAVAILABLE", "message": "later"}}}, "UNAVAILABLE", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body = tc.status, tc.body
			_, err := r.Manifest(ctx, desc)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Manifest = %v, want a *registry.Error", err)
			}
			if e.StatusCode != tc.status || e.Temporary() != tc.temporary || len(e.Errors) != tc.codes || tc.code != "" && !e.Has(tc.code) || e.Has("NOPE") {
				t.Errorf("Error = %+v", e)
			}
			if !strings.Contains(err.Error(), r.Name()) || !strings.Contains(err.Error(), string(desc.Digest)) || !strings.Contains(err.Error(), http.StatusText(tc.status)) {
				t.Errorf("message lacks the repository, what was asked, or the status: %v", err)
			}
			if tc.code != "" && !strings.Contains(err.Error(), tc.code) {
				t.Errorf("message lacks the code: %v", err)
			}
			if len(err.Error()) > 4096 {
				t.Errorf("message of %d bytes", len(err.Error()))
			}
		})
	}
	status, body = http.StatusNotFound, map[string]any{"errors": []map[string]string{{"code": "MANIFEST_UNKNOWN"}}}
	if _, err := r.Manifest(ctx, desc); !errors.Is(err, ErrNotFound) {
		t.Errorf("404: %v, want ErrNotFound", err)
	}
}
