package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/trust"
)

// regFlags are the flags of every command that talks to a registry or the cache; they
// work the same everywhere.
type regFlags struct {
	insecure  []string
	caFile    string
	trust     string
	mountFrom string
}

func (r *regFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&r.insecure, "insecure-registry", nil, "allow plain HTTP / unverified TLS to this registry HOST[:PORT] (loopback needs no flag for plain HTTP)")
	fl.StringVar(&r.caFile, "ca-file", "", "PEM file of extra CA certificates trusted for registries")
	fl.StringVar(&r.trust, "trust", os.Getenv("PYLAYER_TRUST"), "public key (PEM) or trust policy (JSON) for signatures (default $PYLAYER_TRUST)")
}

func (r *regFlags) policy() (*trust.Policy, error) {
	if r.trust == "" {
		return nil, nil // trust.Policy.For explains what to do
	}
	return trust.Load(r.trust)
}

// assembly is how run, ensure and doctor get their layers: from the host cache c, under the
// trust policy (read at each use), pulling with these flags' registry options when the
// network is needed (fetch; the front end has no registry protocol, and hands such a
// command line to the full binary).
func (r *regFlags) assembly(cmd *cobra.Command, c *cache.Cache) assemble.Options {
	return assemble.Options{Cache: c, Policy: r.policy, Fetch: r.fetch(cmd), Progress: pullProgress(cmd), Warn: warner(cmd)}
}

func (g *globals) openCache() (*cache.Cache, error) {
	dir, err := g.cacheDir()
	if err != nil {
		return nil, err
	}
	c, err := cache.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("host cache %s: %w", dir, err)
	}
	return c, nil
}

// warner prints warnings (such as a policy skipping verification) on stderr.
func warner(cmd *cobra.Command) func(string) {
	return func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// pullProgress draws one line of bytes fetched on a terminal, its total known from the
// manifest before the first byte, and with -v logs each blob fetched or found cached.
//
// The bar is hand-written, measured against schollz/progressbar v3.19.1 and
// vbauerster/mpb v8.16.2 (each imported into pylayer, GODEBUG=inittrace=1, medians of 60
// interleaved runs of --version): they add 2 package inits and 0.014 ms (progressbar, which
// also requires a newer golang.org/x/term) or 2 inits and 0.077 ms (mpb, with go-runewidth
// and stripansi) to every command's start-up, 2.93 ms today against a 3 ms target. What
// either would replace is the one Fprintf below: the work, summing bytes over blobs whose
// totals arrive (Queued) before the first byte, the terminal check, the -v log lines, stays.
func pullProgress(cmd *cobra.Command) func(cache.Event) {
	w := cmd.ErrOrStderr()
	log := logctx.From(cmd.Context())
	draw := isTerminal(w)
	if !draw && !log.Enabled(cmd.Context(), slog.LevelDebug) {
		return nil
	}
	var mu sync.Mutex
	done := map[string]int64{}
	total := map[string]int64{}
	return func(e cache.Event) {
		mu.Lock()
		defer mu.Unlock()
		k := e.Blob.String()
		done[k], total[k] = e.Bytes, e.Total
		switch {
		case e.Done:
			done[k] = e.Total
			msg := "blob fetched"
			if e.Cached {
				msg = "blob cached, not fetched"
			}
			log.Debug(msg, "blob", e.Blob.String(), "title", e.Title, "bytes", e.Total)
		case e.Queued:
			return // only totals: nothing to draw yet
		}
		if !draw {
			return
		}
		var d, t int64
		for k := range total {
			d += done[k]
			t += total[k]
		}
		pct := 100.0
		if t > 0 {
			pct = 100 * float64(d) / float64(t)
		}
		fmt.Fprintf(w, "\rpulling %5.1f%%  %s / %s  ", pct, human(d), human(t))
		if t == d {
			fmt.Fprintln(w)
		}
	}
}

func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// complete makes the shell complete flag's value to one of values (`pylayer completion`).
func complete(cmd *cobra.Command, flag string, values ...string) {
	if err := cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)); err != nil {
		panic("cli: completing --" + flag + ": " + err.Error()) // a flag that does not exist: a bug here
	}
}
