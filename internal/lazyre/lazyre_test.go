package lazyre

import "testing"

func TestNew(t *testing.T) {
	re := New(`^a+b$`)
	if re() != re() {
		t.Error("a second call compiled the pattern again")
	}
	if !re().MatchString("aab") || re().MatchString("ba") {
		t.Error("the pattern does not match as regexp would")
	}
	defer func() {
		if recover() == nil {
			t.Error("a bad pattern did not panic on first use")
		}
	}()
	New(`(`)()
}
