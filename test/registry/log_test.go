package registrytest

import (
	"bufio"
	"bytes"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

const (
	logStartup  = `{"go.version":"go1.19.8","level":"info","msg":"listening on 127.0.0.1:5000, tls","time":"2026-11-29T07:29:35Z"}`
	logBlobGET  = `{"http.request.method":"GET","http.request.uri":"/v2/team/pylayer/blobs/sha256:abcd","http.response.status":200,"http.response.written":4096,"level":"info","msg":"response completed"}`
	logNotFound = `{"err.code":"manifest unknown","http.request.method":"GET","http.request.uri":"/v2/team/pylayer/manifests/nope","http.response.status":404,"http.response.written":94,"level":"error","msg":"response completed with error"}`
	logDenied   = `{"http.request.method":"GET","http.request.uri":"/v2/","level":"warning","msg":"error authorizing context: basic authentication challenge for realm \"pylayer-test\": invalid authorization credential"}`
	logAuthzOK  = `{"http.request.method":"GET","http.request.uri":"/v2/","level":"info","msg":"authorized request"}`
	logHEAD     = `{"http.request.method":"HEAD","http.request.uri":"/v2/r/blobs/sha256:ab?x=1","http.response.status":200,"level":"info","msg":"response completed"}`
)

func TestParseLog(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Request
	}{
		{"empty", "", nil},
		{"startup only", logStartup + "\n", nil},
		{"blob GET", logBlobGET + "\n", []Request{{"GET", "/v2/team/pylayer/blobs/sha256:abcd", 200, 4096}}},
		{"error response", logNotFound + "\n", []Request{{"GET", "/v2/team/pylayer/manifests/nope", 404, 94}}},
		{"401 challenge", logDenied + "\n", []Request{{"GET", "/v2/", 401, 0}}},
		{"authorized is not a response", logAuthzOK + "\n", nil},
		{"no written field, query kept", logHEAD + "\n", []Request{{"HEAD", "/v2/r/blobs/sha256:ab?x=1", 200, 0}}},
		{
			"order kept, noise skipped",
			logStartup + "\nnot json at all\n" + logDenied + "\n\n" + logAuthzOK + "\n" + logBlobGET + "\n" + logNotFound + "\n",
			[]Request{{"GET", "/v2/", 401, 0}, {"GET", "/v2/team/pylayer/blobs/sha256:abcd", 200, 4096}, {"GET", "/v2/team/pylayer/manifests/nope", 404, 94}},
		},
		{"unfinished last line", logBlobGET + "\n" + logNotFound, []Request{{"GET", "/v2/team/pylayer/blobs/sha256:abcd", 200, 4096}}},
		{"CRLF", logBlobGET + "\r\n", []Request{{"GET", "/v2/team/pylayer/blobs/sha256:abcd", 200, 4096}}},
		{"status as string", strings.Replace(logBlobGET, `:200`, `:"200"`, 1) + "\n", nil},
		{"status out of range", strings.Replace(logBlobGET, `:200`, `:20`, 1) + "\n", nil},
		{"negative written", strings.Replace(logBlobGET, `:4096`, `:-1`, 1) + "\n", nil},
		{"fractional written", strings.Replace(logBlobGET, `:4096`, `:1.5`, 1) + "\n", nil},
		{"no method", strings.Replace(logBlobGET, `"http.request.method":"GET",`, ``, 1) + "\n", nil},
		{
			"overlong line skipped",
			`{"msg":"` + strings.Repeat("x", maxLogLine+10) + `"}` + "\n" + logBlobGET + "\n",
			[]Request{{"GET", "/v2/team/pylayer/blobs/sha256:abcd", 200, 4096}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLog(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseLog = %+v, want %+v", got, tt.want)
			}
			// One byte at a time: line assembly must not depend on read sizes.
			got, err = parseLog(iotest.OneByteReader(strings.NewReader(tt.in)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("one byte reads: parseLog = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseLogReadError(t *testing.T) {
	_, err := parseLog(iotest.ErrReader(bufio.ErrTooLong))
	if err == nil {
		t.Fatal("parseLog of a failing reader: no error")
	}
}

func TestCountingReader(t *testing.T) {
	in := logBlobGET + "\n" + logNotFound + "\n" + `{"unfinished`
	cr := &countingReader{r: iotest.HalfReader(strings.NewReader(in))}
	reqs, err := parseLog(cr)
	if err != nil || len(reqs) != 2 {
		t.Fatalf("parseLog = %v, %v", reqs, err)
	}
	if want := int64(len(logBlobGET) + len(logNotFound) + 2); cr.completeLines != want {
		t.Errorf("completeLines = %d, want %d", cr.completeLines, want)
	}
}

func FuzzParseLog(f *testing.F) {
	for _, s := range []string{
		"", "\n", logStartup + "\n", logBlobGET + "\n", logNotFound + "\n" + logDenied + "\n",
		logAuthzOK + "\n" + logHEAD, "{}\n", `{"msg":"response completed","http.response.status":1e3}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := parseLog(bytes.NewReader(in))
		if err != nil {
			t.Fatalf("parseLog of in-memory bytes: %v", err)
		}
		for _, q := range got {
			if q.Method == "" || q.Path == "" || q.Status < 100 || q.Status > 999 || q.Written < 0 {
				t.Fatalf("invalid request %+v", q)
			}
		}
		// Read sizes never change the result.
		again, err := parseLog(iotest.OneByteReader(bytes.NewReader(in)))
		if err != nil || !reflect.DeepEqual(got, again) {
			t.Fatalf("one byte reads: %+v, %v; whole: %+v", again, err, got)
		}
		// A complete log parsed twice over gives twice the requests.
		if len(in) > 0 && in[len(in)-1] == '\n' {
			double, err := parseLog(bytes.NewReader(append(bytes.Clone(in), in...)))
			if err != nil || len(double) != 2*len(got) {
				t.Fatalf("doubled log: %d requests (%v), want %d", len(double), err, 2*len(got))
			}
		}
	})
}
