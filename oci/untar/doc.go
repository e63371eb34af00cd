// Package untar is pylayer's one tar extractor. Everything pylayer unpacks from
// outside goes through Extract: layer blobs into the host cache (registry/cache),
// and interpreter tarballs into a prefix (oci/interp). Both get the same,
// strictest rules: no absolute paths or "..", no unclean or non-UTF-8 names, no
// devices, fifos or other special entries, no setuid, setgid or sticky bits, no
// duplicate entries and no entry replacing another, PAX records limited to the
// standard keys and bounded, entry count and sizes capped on the bytes actually
// read, nothing ever written through a symlink, and nothing left behind on error.
// What legitimately differs is an Option: interpreter artifacts may hold symlinks
// that stay inside the root (and tarballs hardlinks to files unpacked before);
// layer blobs may not hold any link.
//
// It lives beside oci, which defines the layer format and writes it (oci.TarTree),
// and takes its symlink rule from there (oci.CheckSymlink), so the arrows point one
// way: layers <- oci <- oci/untar <- oci/interp, registry/cache. It must never import
// the registry client or cache, the broker, the sandbox, the catalog or the CLI. It
// never prints and never logs.
package untar
