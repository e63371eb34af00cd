#!/usr/bin/env bash
# The main job end to end, as far as pylayer goes today: serve real wheels as a local index,
# lock the office set, build its layer artifact reproducibly, and import from it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=.demo
rm -rf "$work"; mkdir -p "$work"
step() { printf '\n== %s\n' "$*"; }
PY=/usr/bin/python3.11

step "1. fixture wheels: Debian's python3-docx, openpyxl, lxml, et-xmlfile, xlsxwriter repacked, plus Debian's pip/setuptools/wheel"
go run ./test/cmd/mkindex -out "$work/index" >/dev/null
ls "$work/index"

step "2. serve them as a PEP 503/691/658 index on 127.0.0.1"
bin/pylayer index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$work/index.url" ] && break; sleep 0.05; done
url=$(cat "$work/index.url"); echo "index: $url"

step "3. lock python-docx, openpyxl and xlsxwriter for CPython 3.11 on manylinux_2_28_x86_64"
key=$(bin/pylayer lock python-docx openpyxl xlsxwriter --index-url "$url" \
  --python 3.11 --platform manylinux_2_28_x86_64 -o "$work/office.lock.json" --cache "$work/cache-a")
echo "key: $key"
python3 - "$work/office.lock.json" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))["packages"]:
    print(f"  {p['name']}=={p['version']}  {p['filename']}  required by {', '.join(p['required_by'])}")
PY

step "4. build the layer artifact (one reproducible blob per wheel, .pyc compiled by $PY)"
d1=$(bin/pylayer build "$work/office.lock.json" --index-url "$url" --interpreter $PY -o "oci:$work/oci-a" --cache "$work/cache-a")
echo "manifest: $d1"

step "5. build again from scratch, in another directory and another cache: same digest"
d2=$(bin/pylayer build "$work/office.lock.json" --index-url "$url" --interpreter $PY -o "oci:$work/oci-b" --cache "$work/cache-b")
echo "manifest: $d2"
[ "$d1" = "$d2" ] || { echo "NOT REPRODUCIBLE: $d1 != $d2"; exit 1; }
echo "identical"

step "6. build once more into the first layout: the key is there, nothing is rebuilt"
time bin/pylayer build "$work/office.lock.json" --index-url "$url" -o "oci:$work/oci-a" --cache "$work/cache-a"

step "7. the artifact: config = the lock, one layer per wheel"
python3 - "$work/oci-a" "$d1" <<'PY'
import json, sys, os
lay, dig = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(lay, "blobs", *dig.split(":"))))
print("artifactType:", m["artifactType"])
print("config:", m["config"]["mediaType"], m["config"]["digest"][:19])
for l in m["layers"]:
    print("  layer", l["digest"][:19], l["size"], "bytes", l["annotations"]["org.opencontainers.image.title"])
print("annotations:", json.dumps(m["annotations"], sort_keys=True))
PY

step "8. unpack the layers and use them: write a .docx and an .xlsx"
mkdir -p "$work/root" "$work/out"
python3 - "$work/oci-a" "$d1" "$work/root" <<'PY'
import json, sys, os, tarfile
lay, dig, root = sys.argv[1:]
m = json.load(open(os.path.join(lay, "blobs", *dig.split(":"))))
for l in m["layers"]:
    with tarfile.open(os.path.join(lay, "blobs", *l["digest"].split(":"))) as t:
        t.extractall(root, filter="data")
PY
PYTHONPATH="$work/root/site-packages" $PY - "$work/out" <<'PY'
import sys, docx, openpyxl, xlsxwriter, lxml.etree
out = sys.argv[1]
d = docx.Document(); d.add_heading("pylayer demo", 0); d.add_paragraph("written from a layer"); d.save(f"{out}/demo.docx")
wb = openpyxl.Workbook(); wb.active["A1"] = "pylayer"; wb.save(f"{out}/demo.xlsx")
print("imported", docx.__file__.split("site-packages/")[1], "and", openpyxl.__name__, openpyxl.__version__)
PY
python3 - "$work/out" <<'PY'
import sys, zipfile, xml.dom.minidom as m
out = sys.argv[1]
for f, part in (("demo.docx", "word/document.xml"), ("demo.xlsx", "xl/workbook.xml")):
    z = zipfile.ZipFile(f"{out}/{f}")
    names = z.namelist()
    assert "[Content_Types].xml" in names and part in names, names
    for n in names:
        if n.endswith(".xml") or n.endswith(".rels"):
            m.parseString(z.read(n))
    print(f"{f}: valid OOXML ({len(names)} parts, {part} parses)")
PY
step "9. start a registry on 127.0.0.1 (Debian's docker-registry, TLS from a fresh CA, htpasswd auth)"
go build -o "$work/registry" ./test/cmd/registry
"$work/registry" >"$work/registry.json" 2>"$work/registry.log" &
reg=$!
trap 'kill $srv $reg 2>/dev/null || true' EXIT
for _ in $(seq 600); do [ -s "$work/registry.json" ] && break; sleep 0.1; done
[ -s "$work/registry.json" ] || { cat "$work/registry.log"; exit 1; }
read -r host ca dockercfg < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["host"], d["ca_file"], d["docker_config"])' "$work/registry.json")
export DOCKER_CONFIG=$dockercfg
echo "registry: $host (credentials in \$DOCKER_CONFIG, never on the command line)"

step "10. make a signing key and publish: push the artifact, tag it <kind>-<key>, sign it"
export COSIGN_PASSWORD=demo-password
(cd "$work" && ../bin/pylayer keygen >/dev/null)
ref=$(bin/pylayer publish "$work/office.lock.json" --repo "$host/team/pylayer" --key "$work/cosign.key" \
  --ca-file "$ca" --index-url "$url" --interpreter $PY --cache "$work/cache-a")
echo "published: $ref"

step "11. an auditor checks the signature with the stock cosign CLI"
cosign=$(bash scripts/tools.sh cosign)
SSL_CERT_FILE=$ca HTTPS_PROXY=http://127.0.0.1:9 "$cosign" verify --key "$work/cosign.pub" --insecure-ignore-tlog=true "$ref" 2>/dev/null \
  | python3 -c 'import json,sys; [print("cosign verify: ok, signed digest", s["critical"]["image"]["docker-manifest-digest"]) for s in json.load(sys.stdin)]'

step "12. a host pulls it: signature verified first, then blobs fetched, unpacked read-only"
root=$(bin/pylayer pull "$ref" --trust "$work/cosign.pub" --ca-file "$ca" --cache "$work/host")
echo "layer root: $root"
bin/pylayer verify "$ref" --trust "$work/cosign.pub" --ca-file "$ca" --cache "$work/host" | head -5
bin/pylayer ls --cache "$work/host"
PYTHONPATH="$root/site-packages" $PY -c 'import docx, openpyxl, xlsxwriter, lxml.etree; print("imports from the pulled layer: ok")'

echo; echo "demo ok"
