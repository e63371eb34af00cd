package web

import (
	"embed"
	"io/fs"
	"sync"
)

//go:embed static
var static embed.FS

// FS holds the page's files at its root: index.html, app.js, app.css. It is made on first
// use, not at package init: the front end links this package (through broker's types), and
// every package init runs before main on each of its starts.
var FS = sync.OnceValue(func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("web: " + err.Error()) // a constant directory that go:embed checked
	}
	return sub
})
