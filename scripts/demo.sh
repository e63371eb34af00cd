#!/usr/bin/env bash
# The main job end to end: real wheels served as a local index, an interpreter and a base
# layer locked, built reproducibly, published to a real registry with TLS and auth, signed,
# checked by the stock cosign CLI, pulled into a fresh host cache, and used by a Python
# script in the bwrap sandbox that writes a .docx and an .xlsx into its workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$PWD/.demo
# Sessions started by root run as an unprivileged user, which must be able to enter the host
# cache and the workspace: a checkout under a private directory (mode 0700) cannot hold them.
if ((EUID == 0)) && ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$PWD" 2>/dev/null; then
  work=/var/tmp/pylayer-demo
  echo "(this checkout is in a directory other users cannot enter: the demo works in $work)"
fi
rm -rf "$work"; mkdir -p "$work"
step() { printf '\n== %s\n' "$*"; }
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
export COSIGN_PASSWORD=demo-password   # the signing key's password, for this demo only

step "1. fixtures: Debian's python3-docx, openpyxl, lxml, et-xmlfile, xlsxwriter, and the curated base (numpy, matplotlib, Pillow, reportlab, pypdf, ...) repacked into wheels with their shared libraries vendored; Debian's python3.11 as a relocatable prefix"
go run ./test/cmd/mkindex -out "$work/index" -curated >/dev/null
ls "$work/index" | sed 's/^/   /'
prefix=$(go run ./test/cmd/pyprefix -out "$work/python")
echo "   interpreter prefix: $prefix ($("$prefix/bin/python3" -c 'import sys; print(sys.version.split()[0])'))"

step "2. serve the wheels as a PEP 503/691/658 index on 127.0.0.1"
bin/pylayer index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/index.url" ] && break; sleep 0.05; done
url=$(cat "$work/index.url"); echo "   index: $url"

step "3. start a registry: Debian's docker-registry on 127.0.0.1, TLS from a fresh CA, htpasswd auth"
go build -o "$work/registry" ./test/cmd/registry
"$work/registry" >"$work/registry.json" 2>"$work/registry.log" &
pids+=($!)
for _ in $(seq 600); do [ -s "$work/registry.json" ] && break; sleep 0.1; done
[ -s "$work/registry.json" ] || { cat "$work/registry.log"; exit 1; }
read -r host ca dockercfg < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["host"], d["ca_file"], d["docker_config"])' "$work/registry.json")
export DOCKER_CONFIG=$dockercfg
repo=$host/team/pylayer
echo "   registry: $host (credentials in \$DOCKER_CONFIG, never on a command line)"

step "4. CI: a signing key, then publish the interpreter (probed once: version, ABI, tags, markers)"
(cd "$work" && "$OLDPWD/bin/pylayer" keygen >/dev/null)
pyref=$(bin/pylayer interpreter publish "$prefix" --repo "$repo" --key "$work/cosign.key" --ca-file "$ca" --cache "$work/ci")
echo "   interpreter: $pyref"

step "5. CI: lock the office set for that interpreter's target (read from the signed artifact)"
key=$(bin/pylayer lock python-docx openpyxl xlsxwriter --index-url "$url" --python-from "$pyref" \
  --trust "$work/cosign.pub" --ca-file "$ca" -o "$work/office.lock.json" --cache "$work/ci")
echo "   key: $key"
python3 - "$work/office.lock.json" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))
print(f"   target: CPython {l['target']['python_full']} {l['target']['abi']} {l['target']['platform']}")
for p in l["packages"]:
    print(f"   {p['name']}=={p['version']}  {p['filename']}  required by {', '.join(p['required_by'])}")
PY

step "6. reproducible: build the layer twice, in two directories with two caches (.pyc by the target interpreter)"
d1=$(bin/pylayer build "$work/office.lock.json" --index-url "$url" --interpreter "$prefix" -o "oci:$work/oci-a" --cache "$work/ci")
d2=$(bin/pylayer build "$work/office.lock.json" --index-url "$url" --interpreter "$prefix" -o "oci:$work/oci-b" --cache "$work/ci-2")
echo "   $d1"; echo "   $d2"
[ "$d1" = "$d2" ] || { echo "NOT REPRODUCIBLE"; exit 1; }
t0=$(date +%s%N); bin/pylayer build "$work/office.lock.json" -o "oci:$work/oci-a" --cache "$work/ci" >/dev/null; t1=$(date +%s%N)
echo "   identical; a rebuild of a key already built takes $(( (t1-t0)/1000000 )) ms"

step "7. CI: publish the base layer (push, tag base-<key>, sign)"
baseref=$(bin/pylayer publish "$work/office.lock.json" --repo "$repo" --key "$work/cosign.key" --ca-file "$ca" \
  --index-url "$url" --interpreter "$prefix" --tag current --cache "$work/ci")
echo "   base: $baseref"

step "8. an auditor checks both signatures with the stock cosign CLI"
cosign=$(bash scripts/tools.sh cosign)
for r in "$pyref" "$baseref"; do
  SSL_CERT_FILE=$ca HTTPS_PROXY=http://127.0.0.1:9 "$cosign" verify --key "$work/cosign.pub" --insecure-ignore-tlog=true "$r" 2>/dev/null \
    | python3 -c 'import json,sys; [print("   cosign verify: ok,", s["critical"]["image"]["docker-manifest-digest"]) for s in json.load(sys.stdin)]'
done
bin/pylayer verify "$baseref" --trust "$work/cosign.pub" --ca-file "$ca" --cache "$work/host" | sed 's/^/   /'

step "9. a host starts up: pull and verify interpreter and base into a fresh cache, probe imports in the sandbox"
export PYLAYER_CACHE=$work/host PYLAYER_TRUST=$work/cosign.pub
bin/pylayer ensure --python "$pyref" --base "$baseref" --ca-file "$ca" | sed 's/^/   /'
bin/pylayer ls | sed 's/^/   /'
bin/pylayer doctor --python "$pyref" --ca-file "$ca" | sed 's/^/   /'

step "10. a session: a Python script in the sandbox writes a .docx and an .xlsx into its workspace"
mkdir -p "$work/workspace"
cat >"$work/workspace/report.py" <<'PY'
import sys, docx, openpyxl, xlsxwriter
d = docx.Document()
d.add_heading("pylayer demo", 0)
d.add_paragraph(f"Written by Python {sys.version.split()[0]} from {sys.prefix}, with python-docx from a signed layer.")
d.save("/workspace/report.docx")
wb = openpyxl.Workbook()
ws = wb.active
ws.append(["package", "version"])
for m in (docx, openpyxl, xlsxwriter):
    ws.append([m.__name__, getattr(m, "__version__", "?")])
wb.save("/workspace/report.xlsx")
print("wrote report.docx and report.xlsx; docx from", docx.__file__)
PY
bin/pylayer run --python "$pyref" --layer "$baseref" --workspace "$work/workspace" --ca-file "$ca" --timeout 60s \
  -- python3 /workspace/report.py | sed 's/^/   /'

step "11. check the OOXML structure of both files"
python3 - "$work/workspace" <<'PY'
import sys, zipfile, xml.dom.minidom as m
out = sys.argv[1]
for f, part in (("report.docx", "word/document.xml"), ("report.xlsx", "xl/workbook.xml")):
    z = zipfile.ZipFile(f"{out}/{f}")
    names = z.namelist()
    assert "[Content_Types].xml" in names and part in names, names
    for n in names:
        if n.endswith(".xml") or n.endswith(".rels"):
            m.parseString(z.read(n))
    print(f"   {f}: valid OOXML ({len(names)} parts; [Content_Types].xml and {part} present; every XML part parses)")
PY

step "12. containment, seen from inside the same sandbox"
bin/pylayer run --python "$pyref" --layer "$baseref" --ca-file "$ca" -- python3 - <<'PY' | sed 's/^/   /' || true
import os, socket, subprocess
try:
    socket.create_connection(("127.0.0.1", 80), timeout=1); print("network: REACHABLE")
except OSError as e:
    print("network: unreachable (", e.__class__.__name__, ")")
for p in ("/usr/x", "/opt/python/x"):
    try:
        open(p, "w"); print(p, "WRITABLE")
    except OSError:
        print(f"write {p}: refused")
print("environment:", sorted(os.environ))
r = subprocess.run(["pip", "install", "requests"], capture_output=True, text=True)
print("pip install requests: exit", r.returncode, "-", r.stderr.splitlines()[0])
PY

step "13. CI: the curated base: numpy, matplotlib, Pillow, reportlab, pypdf, pdfminer.six, markdown and the office set, locked and published"
curref=$(bin/pylayer lock python-docx openpyxl xlsxwriter lxml pillow numpy matplotlib pypdf reportlab markdown pdfminer.six \
  --index-url "$url" --python-from "$pyref" --trust "$work/cosign.pub" --ca-file "$ca" -o "$work/curated.lock.json" --cache "$work/ci" >/dev/null &&
  bin/pylayer publish "$work/curated.lock.json" --repo "$repo" --key "$work/cosign.key" --ca-file "$ca" \
    --index-url "$url" --interpreter "$prefix" --tag curated --cache "$work/ci")
echo "   curated base: $curref ($(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["packages"]))' "$work/curated.lock.json") wheels)"
bin/pylayer ensure --python "$pyref" --base "$curref" --ca-file "$ca" | sed 's/^/   /'

step "14. a session on the curated base: a matplotlib chart, a docx and a PDF report that embed it, the PDF read back with pypdf"
mkdir -p "$work/session-cache"   # the session's ~/.cache: matplotlib's font list, built once
cat >"$work/workspace/chart.py" <<'PY'
import numpy as np, matplotlib.pyplot as plt, docx, pypdf
from docx.shared import Inches
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas
x = np.linspace(0, 2 * np.pi, 200)
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(x, np.sin(x), label="sin"); ax.plot(x, np.cos(x), label="cos"); ax.legend(); ax.set_title("pylayer curated base")
fig.savefig("/workspace/chart.png", dpi=100)
print(f"chart.png: {fig.get_size_inches()[0] * 100:.0f}x{fig.get_size_inches()[1] * 100:.0f} px, numpy {np.__version__}, matplotlib {plt.matplotlib.__version__}")
d = docx.Document(); d.add_heading("pylayer report", 0); d.add_picture("/workspace/chart.png", width=Inches(5)); d.save("/workspace/chart.docx")
print("chart.docx: the chart embedded with python-docx")
c = canvas.Canvas("/workspace/report.pdf", pagesize=A4)
c.drawString(72, 780, "pylayer report: sin and cos"); c.drawImage("/workspace/chart.png", 72, 450, width=450, height=270); c.save()
r = pypdf.PdfReader("/workspace/report.pdf")
page = r.pages[0]
xobjects = page["/Resources"].get("/XObject", {})
images = [k for k in xobjects if xobjects[k].get_object()["/Subtype"] == "/Image"]
print(f"report.pdf: {len(r.pages)} page, text {page.extract_text().strip()!r}, {len(images)} embedded image, read back with pypdf {pypdf.__version__}")
assert images and "sin and cos" in page.extract_text()
PY
bin/pylayer run --python "$pyref" --layer "$curref" --workspace "$work/workspace" --cache-dir "$work/session-cache" --ca-file "$ca" \
  --timeout 120s -- python3 /workspace/chart.py | sed 's/^/   /'

echo; echo "demo ok"
