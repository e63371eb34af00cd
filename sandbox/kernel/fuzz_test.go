package kernel

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzReadLines: the line splitter gives back its input, line by line, and
// refuses a line past its cap whatever the chunking.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 3)
	f.Add([]byte(strings.Repeat("x", 70000)+"\ny\n"), 70000)
	f.Add([]byte(strings.Repeat("x", 70001)), 70000)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		if limit < 0 || limit > 1<<20 {
			return
		}
		var lines [][]byte
		err := readLines(bytes.NewReader(in), limit, func(l []byte) { lines = append(lines, bytes.Clone(l)) })
		longest := 0
		for _, l := range bytes.SplitAfter(in, []byte("\n")) {
			longest = max(longest, len(bytes.TrimSuffix(l, []byte("\n"))))
		}
		if longest > limit {
			if err != errLineTooLong {
				t.Fatalf("a line of %d bytes, limit %d: err %v", longest, limit, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for i, l := range lines {
			if bytes.IndexByte(l, '\n') >= 0 {
				t.Fatalf("line %d holds a newline: %q", i, l)
			}
			got = append(append(got, l...), '\n')
		}
		want := in
		if len(want) > 0 && want[len(want)-1] != '\n' {
			want = append(bytes.Clone(want), '\n')
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("lines %q from %q", lines, in)
		}
	})
}

// FuzzDispatch feeds what a cell could write to the driver's private pipe
// (forged events, broken JSON, other runs' ids) to a kernel with a call under
// way: nothing panics, the call hears only its own run's events, and its
// captures stay within their caps.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"ev":"ready","pid":7,"python":"3.12.4"}`,
		`{"ev":"stream","run":"r1","name":"stdout","text":"hi\n"}`,
		`{"ev":"stream","run":"r1","name":"stderr","text":"` + strings.Repeat("e", 300) + `"}`,
		`{"ev":"stream","run":"r1","name":"other","text":"?"}`,
		`{"ev":"display","run":"r1","mime":"image/png","data":"iVBORw0KGgo="}`,
		`{"ev":"display","run":"r2","mime":"text/plain","data":"forged for another run"}`,
		`{"ev":"result","run":"r1","status":"ok","traceback":["a","b"]}`,
		`{"ev":"result","run":"r1","status":"error","ename":"X"}` + "\n" + `{"ev":"result","run":"r1","status":"ok"}`,
		`{"ev":"pong","id":"p9"}`,
		`{"ev":"pong","id":"p1"}` + "\n" + `{"ev":"pong","id":"p1"}`,
		`{"ev":"stream","run":"r1","name":"stdout","text":"\ud800"}`,
		`{"ev":`, `null`, `[]`, `"x"`, `{"ev":1}`, "\x00\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxOut = 100
		k := &Kernel{o: Options{MaxOutput: maxOut}, pings: map[string]chan struct{}{}, ready: make(chan message, 1)}
		pong := make(chan struct{})
		k.pings["p1"] = pong
		var streamed, displayed int
		c := k.begin("r", func(e Event) {
			switch e.Kind {
			case "stream":
				streamed += len(e.Text)
			case "display":
				displayed += len(e.Data)
			default:
				t.Fatalf("event kind %q", e.Kind)
			}
		})
		if c.id != "r1" {
			t.Fatalf("run id %q", c.id)
		}
		if err := readLines(bytes.NewReader(in), 1<<16, k.dispatch); err != nil && err != errLineTooLong {
			t.Fatal(err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for name, b := range map[string]*strings.Builder{"stdout": &c.stdout, "stderr": &c.stderr} {
			if b.Len() > maxOut+256 {
				t.Fatalf("%s holds %d bytes, cap %d", name, b.Len(), maxOut)
			}
		}
		if streamed != c.stdout.Len()+c.stderr.Len() {
			t.Fatalf("streamed %d bytes, captured %d", streamed, c.stdout.Len()+c.stderr.Len())
		}
		size := 0
		for _, o := range c.outputs {
			size += len(o.Data)
		}
		if size != c.outputsSize || size != displayed || size > MaxOutputs {
			t.Fatalf("outputs of %d bytes, counted %d, displayed %d", size, c.outputsSize, displayed)
		}
		if len(c.result) > 1 {
			t.Fatalf("%d results kept", len(c.result))
		}
		if len(k.pings) > 1 {
			t.Fatalf("pings %v", k.pings)
		}
	})
}
