package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pylayer/pylayer/broker"
)

// Authority is the broker.SessionAuthority of a sandbox host (broker.NewExecHost): it
// asks the broker at c's URL for a session's env with each caller's own token, and maps
// the broker's 401, 403 and 404 to broker.ErrUnauthenticated, ErrForbidden and
// ErrNotFound, and no answer, or a 5xx, to ErrUnavailable.
type Authority struct{ c *Client }

var _ broker.SessionAuthority = Authority{}

// NewAuthority returns the Authority of the broker c calls; c's own token is not used.
func NewAuthority(c *Client) Authority { return Authority{c: c} }

// SessionEnv is GET /v1/sessions/{id}/env with token; see broker.SessionAuthority.
func (a Authority) SessionEnv(ctx context.Context, token, sessionID string) (broker.Env, error) {
	env, err := a.c.WithToken(token).Env(ctx, sessionID)
	if err == nil {
		return env, nil
	}
	var e *Error
	if !errors.As(err, &e) {
		return broker.Env{}, fmt.Errorf("%w: %w", broker.ErrUnavailable, err)
	}
	switch {
	case e.Status == http.StatusUnauthorized:
		return broker.Env{}, fmt.Errorf("%w: %w", broker.ErrUnauthenticated, err)
	case e.Status == http.StatusForbidden:
		return broker.Env{}, fmt.Errorf("%w: %w", broker.ErrForbidden, err)
	case e.Status == http.StatusNotFound:
		return broker.Env{}, fmt.Errorf("%w: %w", broker.ErrNotFound, err)
	case e.Status >= 500 || e.Status == http.StatusTooManyRequests:
		return broker.Env{}, fmt.Errorf("%w: %w", broker.ErrUnavailable, err)
	}
	return broker.Env{}, err
}
