// Package adminui embeds the admin web UI (the Vite build of this
// directory's TypeScript app, in web/dist) for the gateway to serve at
// /admin. The build output is not committed: `make admin-ui` produces it
// (npm ci, vite build). A binary built without it embeds web/fallback.html
// only, a page that says how to build the UI, so `go build ./...` works on a
// machine without Node.js. docs/admin-ui.md explains the choice.
package adminui

import (
	"embed"
	"io/fs"
)

//go:embed all:web
var files embed.FS

// FS returns the UI's files: the Vite build (index.html, assets/…) when it
// was embedded, else a file system whose index.html is the fallback page.
func FS() fs.FS {
	if dist, err := fs.Sub(files, "web/dist"); err == nil {
		if _, err := fs.Stat(dist, "index.html"); err == nil {
			return dist
		}
	}
	return fallbackFS{}
}

// Built reports whether the Vite build was embedded.
func Built() bool {
	_, err := fs.Stat(files, "web/dist/index.html")
	return err == nil
}

// fallbackFS serves web/fallback.html as index.html and nothing else.
type fallbackFS struct{}

func (fallbackFS) Open(name string) (fs.File, error) {
	if name != "index.html" {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return files.Open("web/fallback.html")
}
