package builder

import (
	"context"
	"slices"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/test/fixture"
)

// needyWheel is a wheel whose extension module is the host's libssl: it needs
// libcrypto.so.3, which it does not vendor.
func needyWheel(t *testing.T) fixture.Wheel {
	t.Helper()
	w, err := fixture.NeedyWheel(t.Context(), "needy", "1.0")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestClassifyNative: with native: refuse, a request for an allowlisted wheel that
// needs a library a session lacks is rejected with the wheel and soname named; by
// default it is auto-approved (its build warns).
func TestClassifyNative(t *testing.T) {
	want := "needy-1.0-py3-none-any.whl needs libcrypto.so.3 (by site-packages/needy/_ext.so), which is neither in the wheel nor on the manylinux_2_28 allow-list"
	for _, c := range []struct {
		policy   string
		decision catalog.Decision
		reasons  []string
	}{
		{catalog.NativeRefuse, catalog.Rejected, []string{want}},
		{"", catalog.AutoApproved, nil},
	} {
		e, s := setup(t, &catalog.Catalog{Allow: []catalog.Rule{{Name: "needy"}}, Native: c.policy})
		r, err := e.w.Classify(context.Background(), s, []string{"needy"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Decision != string(c.decision) || (c.reasons != nil && !slices.Equal(r.Reasons, c.reasons)) {
			t.Errorf("native %q: %s %q, want %s %q", c.policy, r.Decision, r.Reasons, c.decision, c.reasons)
		}
		if c.decision == catalog.Rejected && r.State != broker.StateRejected {
			t.Errorf("native %q: state %s, want rejected", c.policy, r.State)
		}
	}
}
