package cli

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/spf13/cobra"
)

// Exit statuses of pylayer exec and shell other than the command's own.
const (
	exitRunError     = 1   // the cell raised
	exitRunTimeout   = 124 // as timeout(1)
	exitRunCancelled = 130 // as an interrupted shell command
)

// warmFlags are the flags of the commands that call a session's warm sandbox.
type warmFlags struct {
	session string
	broker  string
	timeout time.Duration
}

func (f *warmFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.session, "session", "", "the broker session to run in (required)")
	fl.StringVar(&f.broker, "broker", os.Getenv("PYLAYER_BROKER"), "the URL of the pylayer serve that runs the session; the token comes from $PYLAYER_TOKEN (default $PYLAYER_BROKER)")
	fl.DurationVar(&f.timeout, "timeout", broker.DefaultExecTimeout*time.Second, fmt.Sprintf("interrupt the call after this long (at most %ds)", broker.MaxExecTimeout))
}

// client is the broker's client with the token of $PYLAYER_TOKEN (never a flag: argv is
// visible to every user of the host).
func (f *warmFlags) client() (*client.Client, error) {
	switch {
	case f.session == "":
		return nil, errors.New("--session is required: the broker session to run in (ses_...)")
	case f.broker == "":
		return nil, errors.New("--broker URL (or $PYLAYER_BROKER) is required: the pylayer serve that runs the session")
	case f.timeout <= 0 || f.timeout > broker.MaxExecTimeout*time.Second:
		return nil, fmt.Errorf("--timeout %s: want more than 0 and at most %ds", f.timeout, broker.MaxExecTimeout)
	}
	token := os.Getenv("PYLAYER_TOKEN")
	if token == "" {
		return nil, errors.New("$PYLAYER_TOKEN is empty: set it to the session's agent token, or its owner's")
	}
	c, err := client.New(f.broker, token)
	if err != nil {
		return nil, fmt.Errorf("--broker: %w", err)
	}
	return c, nil
}

func newExecCmd(g *globals) *cobra.Command {
	f := &warmFlags{}
	var reset bool
	cmd := &cobra.Command{
		Use: "exec --session ID [--broker URL] -- CODE",
		Example: `  # state persists between calls in the session's interpreter
  PYLAYER_TOKEN=pyl_... pylayer exec --session ses_... --broker http://127.0.0.1:8787 -- 'import docx; n = 1'
  pylayer exec --session ses_... --broker http://127.0.0.1:8787 -- 'print(n + 1)'

  # code from stdin, a fresh interpreter first, the whole result as JSON
  pylayer exec --session ses_... --reset --json -- - < cell.py`,
		Short: "Run Python in a session's persistent interpreter; exits non-zero unless it ran ok",
		Long: `Send CODE (or, for "-", stdin) to the session's warm interpreter on the broker's host,
started on first use in the session's sandbox and kept between calls, so what a cell
defines or imports is there for the next. Its stdout and stderr are printed as they come,
an exception's traceback on stderr, a rich output as a line such as [image/png: 2048 bytes]
(with --json the whole result, outputs included, once it ends). Exits 0 when the code ran
ok, 1 when it raised, 124 when it timed out (interrupted, state kept), 130 when cancelled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			code := args[0]
			if code == "-" {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), broker.MaxCode+1))
				if err != nil {
					return fmt.Errorf("reading the code from stdin: %w", err)
				}
				if len(b) > broker.MaxCode {
					return fmt.Errorf("the code on stdin is larger than %d bytes: put it in a file of the workspace and run that", broker.MaxCode)
				}
				code = string(b)
			}
			req := broker.ExecRequest{Code: code, Timeout: f.timeout.Seconds(), Reset: reset}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			var res broker.ExecResult
			if g.json {
				if res, err = c.Exec(cmd.Context(), f.session, req); err != nil {
					return err
				}
				if err := g.print(out, res, ""); err != nil {
					return err
				}
				return runStatus(res.Status, 0)
			}
			res, err = c.ExecStream(cmd.Context(), f.session, req, func(ev broker.ExecEvent) {
				switch ev.Type {
				case broker.EventStream:
					w := out
					if ev.Name == "stderr" {
						w = errw
					}
					fmt.Fprint(w, ev.Text)
				case broker.EventDisplay:
					fmt.Fprintln(out, outputLine(broker.Output{MIME: ev.MIME, Data: ev.Data}))
				case broker.EventRestart:
					fmt.Fprintln(errw, "pylayer: the session's interpreter was started anew:", ev.Reason)
				}
			})
			if err != nil {
				return err
			}
			printNotes(errw, res.RunID, res.Status, res.StdoutTruncated, res.StderrTruncated, res.OutputsTruncated)
			if res.Error != nil {
				for _, l := range res.Error.Traceback {
					fmt.Fprintln(errw, strings.TrimRight(l, "\n"))
				}
				if len(res.Error.Traceback) == 0 {
					fmt.Fprintf(errw, "%s: %s\n", res.Error.EName, res.Error.EValue)
				}
			}
			return runStatus(res.Status, 0)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&reset, "reset", false, "restart the session's interpreter before running CODE (its state is lost)")
	return cmd
}

func newShellCmd(g *globals) *cobra.Command {
	f := &warmFlags{}
	cmd := &cobra.Command{
		Use: "shell --session ID [--broker URL] -- CMD ...",
		Example: `  PYLAYER_TOKEN=pyl_... pylayer shell --session ses_... --broker http://127.0.0.1:8787 -- ls -l /workspace
  pylayer shell --session ses_... --timeout 2m --json -- 'pip list 2>/dev/null | head'`,
		Short: "Run a shell command in a session's sandbox; exits with its status",
		Long: `Run CMD (its words joined by spaces) with /bin/sh -c in the session's sandbox on the
broker's host: the same workspace and layers as pylayer exec, serialised with its calls.
Prints its stdout and stderr (with --json the whole result) and exits with its exit status,
124 when it timed out, 130 when cancelled.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.Shell(cmd.Context(), f.session, broker.ShellRequest{Command: strings.Join(args, " "), Timeout: f.timeout.Seconds()})
			if err != nil {
				return err
			}
			if g.json {
				if err := g.print(cmd.OutOrStdout(), res, ""); err != nil {
					return err
				}
				return runStatus(res.Status, res.ExitCode)
			}
			fmt.Fprint(cmd.OutOrStdout(), res.Stdout)
			fmt.Fprint(cmd.ErrOrStderr(), res.Stderr)
			if res.Restarted {
				fmt.Fprintln(cmd.ErrOrStderr(), "pylayer: the session's sandbox was started anew:", res.RestartReason)
			}
			printNotes(cmd.ErrOrStderr(), res.RunID, res.Status, res.StdoutTruncated, res.StderrTruncated, false)
			return runStatus(res.Status, res.ExitCode)
		},
	}
	f.register(cmd)
	return cmd
}

// outputLine names a rich output by its type and size (the bytes of base64 data decoded).
func outputLine(o broker.Output) string {
	n := len(o.Data)
	if b, err := base64.StdEncoding.DecodeString(o.Data); err == nil && !strings.HasPrefix(o.MIME, "text/") && o.MIME != "application/json" {
		n = len(b)
	}
	return fmt.Sprintf("[%s: %d bytes]", o.MIME, n)
}

// printNotes says on stderr what the result's status and truncation flags mean.
func printNotes(w io.Writer, run, status string, outCut, errCut, outputsCut bool) {
	switch status {
	case broker.RunTimeout:
		fmt.Fprintf(w, "pylayer: run %s timed out and was interrupted (the session's state is kept unless it had to be killed)\n", run)
	case broker.RunCancelled:
		fmt.Fprintf(w, "pylayer: run %s was cancelled\n", run)
	}
	for _, c := range []struct {
		cut  bool
		what string
	}{{outCut, "stdout"}, {errCut, "stderr"}, {outputsCut, "the rich outputs"}} {
		if c.cut {
			fmt.Fprintf(w, "pylayer: %s of run %s was cut at the broker's cap\n", c.what, run)
		}
	}
}

// runStatus is the error (an ExitCode) of a run that did not end ok; exit is a shell
// command's exit status.
func runStatus(status string, exit int) error {
	switch status {
	case broker.RunOK:
		if exit != 0 {
			return ExitCode(exit)
		}
		return nil
	case broker.RunTimeout:
		return ExitCode(exitRunTimeout)
	case broker.RunCancelled:
		return ExitCode(exitRunCancelled)
	}
	if exit != 0 {
		return ExitCode(exit)
	}
	return ExitCode(exitRunError)
}
