#!/bin/sh
# pylayer pip shim: packages cannot be installed inside this sandbox.
cat >&2 <<'MSG'
pip is disabled in this sandbox: packages come from pylayer layers.
Ask for more packages through the pylayer broker (POST /v1/sessions/{id}/requests)
with the requirements you need, e.g. "openpyxl==3.1.2" or "python-docx"; once the
request is approved the packages are mounted in your next run. Nothing can be
installed here: the file system is read-only and there is no network.
MSG
exit 1
