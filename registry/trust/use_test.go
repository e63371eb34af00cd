package trust

import (
	"errors"
	"strings"
	"testing"
)

// fakeIDs names each key file's ID after the file: "/k/a.pub" -> "sha256:a". A file
// called "/k/missing.pub" cannot be read.
func fakeIDs(files []string) ([]string, error) {
	var ids []string
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "/k/"), ".pub")
		if name == "missing" {
			return nil, errors.New("reading key " + f + ": no such file")
		}
		ids = append(ids, "sha256:"+name)
	}
	return ids, nil
}

func signed(repo string, keys ...string) Admission {
	a := Admission{Repository: repo, Rule: "(rule)"}
	for _, k := range keys {
		ref := repo
		if name, claim, ok := strings.Cut(k, "="); ok { // "a=other/repo": key a, claiming other/repo
			k, ref = name, claim
		}
		a.Signers = append(a.Signers, Signer{KeyID: "sha256:" + k, DockerReference: ref})
	}
	return a
}

func unsigned(repo string) Admission {
	return Admission{Repository: repo, Rule: "(rule)", Unsigned: true}
}

// TestPermits: the current policy against the admission records of a cached digest.
func TestPermits(t *testing.T) {
	p := &Policy{source: "/etc/pylayer/policy.json", Repositories: []Rule{
		{Match: "reg.example/team/*", Keys: []string{"/k/a.pub"}},
		{Match: "reg.example/team/both", Keys: []string{"/k/a.pub", "/k/b.pub"}},
		{Match: "reg.example/mirror/*", Keys: []string{"/k/a.pub"}},
		{Match: "reg.example/bkey/*", Keys: []string{"/k/b.pub"}},
		{Match: "reg.example/prod/*", Keys: []string{"/k/a.pub"}, RequireDockerReference: true},
		{Match: "reg.example/open/*", InsecureAcceptUnsigned: true},
		{Match: "oci:/scratch", InsecureAcceptUnsigned: true},
		{Match: "oci:/signed", Keys: []string{"/k/a.pub"}},
		{Match: "reg.example/broken/*", Keys: []string{"/k/missing.pub"}},
	}}
	cases := []struct {
		name     string
		repo     string
		admitted []Admission
		want     int      // index of the admission that counts; -1: refused
		why      []string // in the refusal
		err      error    // the refusal wraps it (default ErrNotAdmitted)
	}{
		{name: "signed here, key still trusted", repo: "reg.example/team/x",
			admitted: []Admission{signed("reg.example/team/x", "a")}, want: 0},
		{name: "names normalized on both sides", repo: "REG.EXAMPLE:443/team/x",
			admitted: []Admission{signed("reg.example/team/x", "a")}, want: 0},
		{name: "no record", repo: "reg.example/team/x", want: -1,
			why: []string{"no record of who admitted it", "pull it again from reg.example/team/x"}},
		{name: "key removed", repo: "reg.example/bkey/x",
			admitted: []Admission{signed("reg.example/bkey/x", "a")}, want: -1,
			why: []string{"the key that admitted it (sha256:a) was removed from the policy for reg.example/bkey/x", "pull it again from reg.example/bkey/x with a key the policy trusts"}},
		{name: "one of two keys left", repo: "reg.example/team/both",
			admitted: []Admission{signed("reg.example/team/both", "b")}, want: 0},
		{name: "unsigned exception stays in its layout", repo: "reg.example/team/x",
			admitted: []Admission{unsigned("oci:/scratch")}, want: -1,
			why: []string{"unsigned through oci:/scratch", "an unsigned exception stays in its repository"}},
		{name: "unsigned here, rule now requires keys", repo: "oci:/signed",
			admitted: []Admission{unsigned("oci:/signed")}, want: -1,
			why: []string{"unsigned through oci:/signed", `the rule "oci:/signed" for oci:/signed now requires a signature`}},
		{name: "unsigned here, rule still unsigned", repo: "oci:/scratch/",
			admitted: []Admission{unsigned("oci:/scratch")}, want: 0},
		{name: "unsigned elsewhere, never for an unsigned repo either", repo: "reg.example/open/x",
			admitted: []Admission{unsigned("oci:/scratch")}, want: -1,
			why: []string{"an unsigned exception stays in its repository"}},
		{name: "signed elsewhere with a key both trust", repo: "reg.example/mirror/x",
			admitted: []Admission{signed("reg.example/team/x", "a")}, want: 0},
		{name: "signed elsewhere, key not trusted here", repo: "reg.example/bkey/x",
			admitted: []Admission{signed("reg.example/team/x", "a")}, want: -1,
			why: []string{"admitted through reg.example/team/x signed by sha256:a, a key the policy does not trust for reg.example/bkey/x"}},
		{name: "signed elsewhere, key since removed there", repo: "reg.example/team/both",
			admitted: []Admission{signed("reg.example/bkey/x", "a")}, want: -1,
			why: []string{"the key that admitted it through reg.example/bkey/x (sha256:a) was removed from the policy for reg.example/bkey/x"}},
		{name: "signed elsewhere, that repository now unsigned", repo: "reg.example/team/x",
			admitted: []Admission{signed("reg.example/open/x", "a")}, want: -1,
			why: []string{"checks no signature"}},
		{name: "signed elsewhere, no rule there any more", repo: "reg.example/team/x",
			admitted: []Admission{signed("reg.example/gone/x", "a")}, want: -1,
			why: []string{"no rule any more"}},
		{name: "signed elsewhere, used from an unsigned repo", repo: "reg.example/open/x",
			admitted: []Admission{signed("reg.example/team/x", "a")}, want: 0},
		{name: "signed here, rule now unsigned", repo: "reg.example/open/x",
			admitted: []Admission{signed("reg.example/open/x", "a")}, want: 0},
		{name: "docker reference required and named", repo: "reg.example/prod/app",
			admitted: []Admission{signed("reg.example/prod/app", "a")}, want: 0},
		{name: "docker reference required, signature names another", repo: "reg.example/prod/app",
			admitted: []Admission{signed("reg.example/prod/app", "a=reg.example/team/app")}, want: -1,
			why: []string{`its signature names the repository "reg.example/team/app"`, "requires one that names reg.example/prod/app"}},
		{name: "docker reference required, admitted elsewhere", repo: "reg.example/prod/app",
			admitted: []Admission{signed("reg.example/team/app", "a")}, want: -1,
			why: []string{"requires one that names reg.example/prod/app"}},
		{name: "the second admission counts", repo: "reg.example/team/x",
			admitted: []Admission{unsigned("oci:/scratch"), signed("reg.example/team/x", "a")}, want: 1},
		{name: "every reason is given", repo: "reg.example/bkey/x",
			admitted: []Admission{unsigned("oci:/scratch"), signed("reg.example/bkey/x", "a")}, want: -1,
			why: []string{"unsigned exception stays", "was removed from the policy"}},
		{name: "signed, but no signer recorded", repo: "reg.example/team/x",
			admitted: []Admission{{Repository: "reg.example/team/x"}}, want: -1,
			why: []string{"names no signer"}},
		{name: "no rule for the repository", repo: "reg.example/nowhere/x",
			admitted: []Admission{signed("reg.example/nowhere/x", "a")}, want: -1, err: ErrNoPolicy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := p.Permits(c.repo, c.admitted, fakeIDs)
			if c.want >= 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got != c.want {
					t.Fatalf("permitted by admission %d, want %d", got, c.want)
				}
				return
			}
			if got != -1 {
				t.Errorf("refused, but returned index %d", got)
			}
			want := c.err
			if want == nil {
				want = ErrNotAdmitted
			}
			if !errors.Is(err, want) {
				t.Fatalf("got %d, %v; want an error wrapping %v", got, err, want)
			}
			for _, s := range c.why {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the refusal does not say %q:\n%v", s, err)
				}
			}
		})
	}
}

func TestPermitsKeyFileError(t *testing.T) {
	p := &Policy{Repositories: []Rule{{Match: "reg.example/broken/*", Keys: []string{"/k/missing.pub"}}}}
	_, err := p.Permits("reg.example/broken/x", []Admission{signed("reg.example/broken/x", "a")}, fakeIDs)
	if err == nil || errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("an unreadable key file must fail as such, got %v", err)
	}
}
