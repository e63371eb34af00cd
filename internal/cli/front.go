//go:build lean

package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/broker"
)

// The front end (built with -tags lean, installed as pylayer) holds only the commands
// an agent's session calls on every step: run, and exec and shell on a warm session.
// Go runs the package initialisation of everything a binary links before main, and the
// full command tree links the signing, SQLite, PostgreSQL and YAML code: 156 package
// inits, 2.3 ms by GODEBUG=inittrace=1, against 124 and 1.1 ms here, and --version took
// 4.7 ms against 3.3 ms in the same run of bench/run.sh (since then, the OCI types are
// this module's own, oci/digest and oci/spec/v1, without go-digest's regexps: 113 inits,
// 0.73 ms, and --version 2.44 ms against 2.76 in one interleaved run). Every other command
// line is handed, unchanged, to the full binary beside it (FullName), which holds every
// command, these three included: run --session --db needs a store, which the front end
// has not linked.
const lean = true

// FullName is the name of the full binary, which the front end executes beside itself.
const FullName = "pylayer-full"

var commands = []struct {
	name string
	new  func(*globals) *cobra.Command
}{
	{"run", newRunCmd}, {"exec", newExecCmd}, {"shell", newShellCmd},
}

// sessionFromDB reads a session from the broker's store, which only the full binary
// links: Main hands the command line over when it sees errFull.
func sessionFromDB(*cobra.Command, string, string) (broker.Session, []broker.Binding, error) {
	return broker.Session{}, nil, errFull
}

// fetch is nil: the front end links no registry protocol, so an artifact the cache
// lacks fails with local.ErrNeedsNetwork, and Main hands the command line over.
func (r *regFlags) fetch(*cobra.Command) assemble.Fetcher { return nil }

// forward replaces this process with the full binary, run on the same arguments and
// environment. It returns only when that fails, with Main's exit status.
func forward(args []string, stderr io.Writer) int {
	exe, err := os.Executable()
	if err == nil {
		full := filepath.Join(filepath.Dir(exe), FullName)
		argv0 := "pylayer"
		if len(os.Args) > 0 {
			argv0 = os.Args[0]
		}
		err = syscall.Exec(full, append([]string{argv0}, args...), os.Environ())
		err = fmt.Errorf("%s: %w", full, err)
	}
	fmt.Fprintf(stderr, "pylayer: this command is in the full pylayer binary, which could not be run: %v\n"+
		"  (this pylayer is the front end for run, exec and shell: install %s beside it, as make build does)\n", err, FullName)
	return 1
}
