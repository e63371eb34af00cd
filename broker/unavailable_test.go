package broker_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/pylayer/pylayer/broker"
)

// downClassifier fails as a classifier does when the index does not answer.
type downClassifier struct{}

func (downClassifier) Classify(context.Context, broker.Session, []string, *broker.Upload) (broker.Request, error) {
	return broker.Request{}, fmt.Errorf("%w: listing foo: dial tcp 127.0.0.1:9: connection refused", broker.ErrUnavailable)
}

// TestClassifierUnavailable: a failing index is a 503 with Retry-After, and nothing is
// stored: no request, no audit event, nothing for the builder.
func TestClassifierUnavailable(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Classifier = downClassifier{} })
	before := e.snapshot()
	code, h, body := e.do(http.MethodPost, "/v1/sessions/"+e.sesA+"/requests", e.agentA, "application/json", `{"packages": ["foo==1.0"]}`)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("status %d (%s), want 503", code, body)
	}
	if ra := h.Get("Retry-After"); ra != fmt.Sprint(int(broker.RetryAfter.Seconds())) {
		t.Errorf("Retry-After = %q, want %v in seconds", ra, broker.RetryAfter)
	}
	e.unchanged("after a 503", before)
	if got := e.builder.enqueued(); len(got) != 0 {
		t.Errorf("enqueued %v after a 503", got)
	}
}
