// Package logctx carries the logger in the context, so that no package of pylayer needs a
// global logger: the CLI (or a test) puts one in, libraries take it out.
//
// It imports nothing of pylayer.
package logctx

import (
	"context"
	"log/slog"
)

type key struct{}

// With returns a context carrying l.
func With(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, key{}, l)
}

// From returns the context's logger, or one that discards everything.
func From(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(key{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
