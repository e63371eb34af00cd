package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
)

// brokenStore is a store whose write check fails, as a full disk or a read-only file make it.
type brokenStore struct{ broker.Store }

func (brokenStore) CheckWrite(context.Context) error {
	return errors.New("disk I/O error writing /var/lib/pylayer/broker.db-wal")
}

// plainStore is a store that cannot check writes at all.
type plainStore struct{ broker.Store }

func TestReadyz(t *testing.T) {
	e := newEnv(t, nil)
	var v struct{ Status, Error, Hint string }
	e.mustDo("GET", "/readyz", "", "", "", http.StatusOK, &v)
	if v.Status != "ready" {
		t.Errorf("readyz = %+v", v)
	}
	// The real store, made read-only under the broker: readyz sees it, healthz does not.
	db := e.store.DB()
	db.SetMaxOpenConns(1) // so the pragma below holds for every statement
	if _, err := db.Exec(`PRAGMA query_only = 1`); err != nil {
		t.Fatal(err)
	}
	code, h, b := e.do("GET", "/readyz", "", "", "")
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || json.Unmarshal(b, &v) != nil || v.Error == "" || v.Hint == "" {
		t.Errorf("readyz of a read-only store: %d %s, want 503 with a reason", code, b)
	}
	e.mustDo("GET", "/healthz", "", "", "", http.StatusOK, nil)
	if !strings.Contains(e.logs.String(), "readonly") {
		t.Errorf("the log lacks the cause")
	}
	if _, err := db.Exec(`PRAGMA query_only = 0`); err != nil {
		t.Fatal(err)
	}
	e.mustDo("GET", "/readyz", "", "", "", http.StatusOK, nil)

	for name, st := range map[string]broker.Store{"failing": brokenStore{e.store}, "unable": plainStore{e.store}} {
		srv, err := broker.NewServer(broker.Options{Store: st, Classifier: fakeClassifier{}})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &v) != nil || v.Status != "not ready" || v.Error == "" {
			t.Errorf("%s store: %d %s, want 503", name, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "/var/lib") {
			t.Errorf("%s store: the answer shows a host path: %s", name, rec.Body)
		}
	}
}
