package pyoracle

import "testing"

func TestRun(t *testing.T) {
	var got struct {
		N         int    `json:"n"`
		Packaging string `json:"packaging"`
	}
	Run(t, `out = {"n": inp["n"] + 1, "packaging": packaging.__version__}`, map[string]int{"n": 41}, &got)
	if got.N != 42 || got.Packaging != "21.3" {
		t.Fatalf("Run = %+v, want n 42 and packaging 21.3", got)
	}
}
