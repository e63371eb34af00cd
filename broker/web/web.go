package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS holds the page's files at its root: index.html, app.js, app.css.
var FS fs.FS = mustSub(static, "static")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic("web: " + err.Error()) // a constant directory that go:embed checked
	}
	return sub
}
