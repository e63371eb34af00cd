// Package index is a client for Python package indexes that speak the
// "simple" repository API (PEP 503 HTML, PEP 691 JSON, PEP 658/714 metadata
// files, PEP 592 yanking) and a server that publishes a flat directory of
// wheels and sdists as such an index.
//
// The client lists a project's files, fetches core metadata (the PEP 658
// ".metadata" file or, failing that, the METADATA inside the wheel) and
// downloads files with streaming sha256 verification and an atomic rename.
// Credentials, from the index URL or a netrc file, are sent only to the
// index's own origin and never appear in errors, URLs or logs.
//
// A wheel's METADATA is read, as uv does, with HTTP range requests: the end
// of the zip (its central directory), then that one member. The range reader
// (zipdir.go) is stricter than archive/zip and a fuzz test holds it to reading
// the same bytes; a server that does not answer ranges properly, or a zip the
// reader does not accept, costs a download of the whole wheel, verified and
// read with archive/zip. Metadata can be cached on disk by the file's sha256
// (WithMetadataCache).
//
// The server is used by tests (pip is run against it as an oracle) and by
// hosts that want to offer a curated wheel directory as an index. With
// WithJSON(false) and WithMetadataFiles(false) it is a plain PEP 503 index.
//
// Behaviour follows pip 23.2.1 (the reference client) except where noted on
// the parsing functions: a bare data-yanked attribute and a JSON "yanked": ""
// count as yanked (PEP 592), where pip ignores them.
//
// Project pages are read by a small scanner of our own (htmlscan.go), modelled on
// Python's html.parser as pip uses it, not by golang.org/x/net/html: pip tells a bare
// attribute (<a data-core-metadata href=...>, None to it) from an empty one (=""), and
// x/net/html's tokenizer gives both as "", which would turn a page that offers no
// metadata into one that does. The oracle tests run pip on the same pages.
//
// This package must never import registry, oci, sandbox, broker or catalog
// packages, nor anything that prints or logs globally: besides the standard
// library it uses only internal/fsx and the context's logger (internal/logctx).
package index
