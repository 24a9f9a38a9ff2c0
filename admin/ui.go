package admin

import (
	"bytes"
	"io/fs"
	"mime"
	"path"
	"strings"

	"github.com/valyala/fasthttp"
)

// SetUI installs the admin UI's files (index.html and assets/), served
// at /admin, and at /console for the users' console (the same app: its
// console routes); nil removes them, and both answer 404.
func (s *Server) SetUI(fsys fs.FS) {
	if fsys == nil {
		s.adm.ui.Store(nil)
		return
	}
	s.adm.ui.Store(&uiFiles{fsys})
}

func isAdminUIPath(p []byte) bool {
	return string(p) == "/admin" || bytes.HasPrefix(p, []byte("/admin/")) || isConsoleUIPath(p)
}

// isConsoleUIPath reports whether p is the users' console UI: /console or
// under /console/.
func isConsoleUIPath(p []byte) bool {
	return string(p) == "/console" || bytes.HasPrefix(p, []byte("/console/"))
}

// adminUI serves the single-page admin UI: a file that exists is served as
// is (assets/ names carry a content hash, so they are cached for a year);
// any other path under /admin gets index.html, so the UI's own routes work
// on reload. Every path under /console gets index.html (its assets are
// under /admin/assets/). Every answer carries a strict Content-Security-Policy.
func (s *Server) adminUI(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		writeError(ctx, errMethod(string(ctx.Method()), string(ctx.Path())))
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		return
	}
	ui := s.adm.ui.Load()
	if ui == nil {
		writeError(ctx, errNotFound(string(ctx.Path())))
		return
	}
	if p := string(ctx.Path()); p == "/admin" || p == "/console" {
		ctx.Redirect(p+"/", fasthttp.StatusFound)
		return
	}
	name := strings.TrimPrefix(path.Clean(string(ctx.Path())), "/admin")
	name = strings.TrimPrefix(name, "/")
	console := isConsoleUIPath(ctx.Path())
	if console {
		name = ""
	}
	b, err := fs.ReadFile(ui.fs, name)
	if name == "" || err != nil {
		if strings.HasPrefix(name, "assets/") {
			writeError(ctx, errNotFound(string(ctx.Path())))
			return
		}
		name = "index.html"
		if b, err = fs.ReadFile(ui.fs, name); err != nil {
			writeError(ctx, errNotFound(string(ctx.Path())))
			return
		}
		if console {
			// The tab says what the page is before its script runs (and
			// without scripts), as the console's own document.title does.
			b = bytes.Replace(b, []byte("<title>Troupe admin</title>"), []byte("<title>Troupe console</title>"), 1)
		}
	}
	h := &ctx.Response.Header
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.SetContentType(ct)
	if strings.HasPrefix(name, "assets/") {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	// CodeMirror inserts <style> elements, hence 'unsafe-inline' for styles only.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	ctx.SetBody(b)
}
