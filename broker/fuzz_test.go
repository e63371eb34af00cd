package broker_test

import (
	"testing"

	"github.com/pylayer/pylayer/broker"
)

// FuzzRequestBody: no body POSTed to /requests makes the server answer 5xx, and a 4xx
// never stores anything.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"packages":["foo==1"]}`, `{"packages":["pendme"]}`, `{"packages":[]}`, `{"packages":null}`, `{}`, `[]`, `null`,
		`{"packages":["a","b[x]>=1; python_version<'3.12'"]}`, `{"packages":[1]}`, `{"packages":["foo @ file:///x"]}`,
		`{"packages":["\u0000"]}`, `{"packages":["a"]}}`, `{"packages":["a"],"packages":["b"]}`, "\xff", ``,
		`{"packages":["denyme (>=1,<2)"]}`, `{"packages":["x~=1.0alpha1"]}`, `{"packages":["boom"]}`,
	} {
		f.Add(s)
	}
	e := newEnv(f, func(o *broker.Options) { o.Classifier = fakeClassifier{noFail: true} })
	f.Fuzz(func(t *testing.T, body string) {
		e.t = t // inputs run one at a time in a process
		before := e.snapshot()
		code, _, b := e.do("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, "application/json", body)
		if code >= 500 {
			t.Fatalf("%q: %d %s", body, code, b)
		}
		if code >= 400 {
			e.unchanged("refused body", before)
		}
	})
}
