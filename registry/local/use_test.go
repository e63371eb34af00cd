package local

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pylayer/pylayer/oci/digest"
)

// FuzzUseRecord: a use record read back from the cache is only accepted whole and valid,
// never panics, and what is accepted encodes to a record accepted again as the same.
func FuzzUseRecord(f *testing.F) {
	d := digest.Digest("sha256:" + hex64)
	tgt := `{"python":"3.11","python_full":"3.11.2","implementation":"cp","abi":"cp311","platform":"manylinux_2_28_x86_64","platforms":["manylinux_2_28_x86_64"],"markers":{}}`
	key := "55a12f5da18034e2cac75dce263eff44e972d4f6cb23f07623501ca4fdd5f674"
	f.Add([]byte(`{"format":1,"digest":"` + d.String() + `","kind":"base","layer":{"kind":"base","resolution_key":"` + key + `","target":` + tgt + `,"wheels":["a-1.0-py3-none-any.whl"]}}`))
	f.Add([]byte(`{"format":1,"digest":"` + d.String() + `","kind":"ext","layer":{"kind":"ext","base":"` + key + `","target":` + tgt + `,"wheels":[]}}`))
	f.Add([]byte(`{"format":1,"digest":"` + d.String() + `","kind":"python","interpreter":` + tgt + `}`))
	f.Add([]byte(`{"format":1,"digest":"` + d.String() + `","kind":"python","layer":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseUseRecord(b, d)
		if err != nil {
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("accepted %q, which does not encode: %v", b, err)
		}
		r2, err := parseUseRecord(again, d)
		if err != nil {
			t.Fatalf("accepted %q, refused its encoding %s: %v", b, again, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("%q read back as %+v, its encoding as %+v", b, r, r2)
		}
	})
}
