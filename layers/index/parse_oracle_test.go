package index

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os/exec"
	"testing"
	"time"
)

// pipParseScript parses index pages with pip's own collector and prints
// what pip makes of every link.
const pipParseScript = `
import json, sys
from pip._internal.index.collector import parse_links, IndexContent
out = []
for page in json.load(sys.stdin):
    ic = IndexContent(page["body"].encode(), page["ct"], None, page["url"], cache_link_parsing=False)
    links = []
    for l in parse_links(ic):
        md = l.metadata_file_data
        links.append({
            "url": l.url_without_fragment,
            "filename": l.filename,
            "sha256": l._hashes.get("sha256", ""),
            "requires_python": l.requires_python or "",
            "yanked": l.yanked_reason is not None,
            "reason": l.yanked_reason or "",
            "has_metadata": md is not None,
            "metadata_sha256": ((md.hashes or {}).get("sha256", "")) if md else "",
        })
    out.append(links)
json.dump(out, sys.stdout)
`

type oracleLink struct {
	URL            string `json:"url"`
	Filename       string `json:"filename"`
	SHA256         string `json:"sha256"`
	RequiresPython string `json:"requires_python"`
	Yanked         bool   `json:"yanked"`
	Reason         string `json:"reason"`
	HasMetadata    bool   `json:"has_metadata"`
	MetadataSHA256 string `json:"metadata_sha256"`
}

// oraclePages holds pages on which our parser must agree with pip exactly
// (every link belongs to project "demo" and is http(s)).
var oraclePages = []struct {
	name, ct, body string
}{
	{"pypi style", mediaTextHTML, `<!DOCTYPE html><html><body>
<a href="https://files.example/packages/demo-1.0-py3-none-any.whl#sha256=` + hexA + `" data-requires-python="&gt;=3.8" data-dist-info-metadata="sha256=` + hexB + `" data-core-metadata="sha256=` + hexB + `">demo-1.0-py3-none-any.whl</a><br/>
<a href="https://files.example/packages/demo-1.1.tar.gz#sha256=` + hexB + `" data-requires-python="&gt;=3.8,&lt;4" data-yanked="broken &amp; bad">demo-1.1.tar.gz</a><br/>
<a href="https://files.example/packages/demo-1.2.tar.gz#sha256=` + hexA + `" data-yanked="">demo-1.2.tar.gz</a>
</body></html>`},
	{"relative and base", mediaHTML, `<html><head><base href="https://mirror.example/root/sub/"></head><body>
<a href="../../files/demo-2.0-py3-none-any.whl#egg=demo&sha256=` + hexA + `">x</a>
<a href="demo-2.1.tar.gz">y</a>
<a href="/abs/demo-2.2.zip?x=1&amp;y=2#sha256=` + hexB + `">z</a>
</body></html>`},
	{"case, quotes and entities", mediaTextHTML, `<HTML><BODY>
<A HREF='demo-3.0.tar.gz' DATA-REQUIRES-PYTHON=">=3.7" Data-Core-Metadata=true>a</A>
<a href=demo-3.1.tar.gz#sha256=` + hexA + ` data-requires-python=&gt;=3.6&#44;!=3.7.*>b</a>
<a href="demo-3.2.tar.gz" data-requires-python="&gt=3.5 &lt 4" data-core-metadata="md5=abc">c</a>
<a href="demo-3.3.tar.gz" data-core-metadata="nonsense" data-dist-info-metadata="sha256=` + hexA + `">d</a>
<a href="demo-3.4.tar.gz" data-core-metadata="sha256=` + hexA + `" data-dist-info-metadata="sha256=` + hexB + `">e</a>
<a data-requires-python=">=2" href="demo-3.5.tar.gz" href="demo-3.6.tar.gz">dup</a>
<a name="x">no href</a><a href="">empty href</a>
</BODY></HTML>`},
	{"comments and scripts", mediaTextHTML, `<html><body>
<!-- <a href="demo-9.9.tar.gz">commented</a> -->
<script>var s = '<a href="demo-9.8.tar.gz">';</script>
<style>a { content: "<a href='demo-9.7.tar.gz'>" }</style>
<a   href = "demo-4.0.tar.gz"   data-yanked = "why" >ok</a>
<abbr href="demo-9.6.tar.gz">not an anchor</abbr>
<a href="demo-4.1.tar.gz"/>
</body></html>`},
	{"json", mediaJSON, `{"meta": {"api-version": "1.1"}, "name": "demo", "files": [
{"filename": "demo-5.0-py3-none-any.whl", "url": "../../f/demo-5.0-py3-none-any.whl", "hashes": {"sha256": "` + hexA + `"}, "requires-python": ">=3.8", "yanked": false, "core-metadata": {"sha256": "` + hexB + `"}},
{"filename": "demo-5.1.tar.gz", "url": "https://cdn.example/demo-5.1.tar.gz#sha256=` + hexB + `", "hashes": {"sha256": "` + hexA + `"}, "yanked": "security", "dist-info-metadata": true},
{"filename": "demo-5.2.tar.gz", "url": "demo-5.2.tar.gz", "hashes": {}, "yanked": true, "requires-python": null, "core-metadata": false, "dist-info-metadata": true},
{"filename": "demo-5.3.tar.gz", "url": "demo-5.3.tar.gz", "hashes": {"md5": "x"}, "core-metadata": null, "dist-info-metadata": {"md5": "y"}}
]}`},
}

const (
	hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hexB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestParseAgreesWithPip feeds the same pages to pip's parser and ours.
func TestParseAgreesWithPip(t *testing.T) {
	py := python3(t)
	const pageURL = "https://index.example/simple/demo/"
	type in struct {
		Body string `json:"body"`
		CT   string `json:"ct"`
		URL  string `json:"url"`
	}
	var input []in
	for _, p := range oraclePages {
		input = append(input, in{p.body, p.ct, pageURL})
	}
	stdin, _ := json.Marshal(input)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", pipParseScript)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pip parser: %v\n%s", err, stderr.String())
	}
	var want [][]oracleLink
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(pageURL)
	for i, p := range oraclePages {
		t.Run(p.name, func(t *testing.T) {
			var files []File
			if p.ct == mediaJSON {
				files, err = parseJSON(base, "demo", []byte(p.body))
				if err != nil {
					t.Fatal(err)
				}
			} else {
				files = parseHTML(base, "demo", []byte(p.body))
			}
			var got []oracleLink
			for _, f := range files {
				got = append(got, oracleLink{f.URL, f.Filename, f.SHA256, f.RequiresPython, f.Yanked, f.YankedReason, f.HasMetadata, f.MetadataSHA256})
			}
			if len(got) != len(want[i]) {
				t.Fatalf("got %d links, pip %d:\n got %+v\npip %+v", len(got), len(want[i]), got, want[i])
			}
			for j := range got {
				if got[j] != want[i][j] {
					t.Errorf("link %d:\n got %+v\npip %+v", j, got[j], want[i][j])
				}
			}
		})
	}
}
