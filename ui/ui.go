// Package ui serves the web UI: plain HTML, CSS and JavaScript embedded in
// the binary, which read and write through the HTTP API of the node that
// serves them and follow its event stream. Nothing is loaded from
// elsewhere and there is no build step.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// Prefix is the path the UI is served under.
const Prefix = "/ui/"

// contentSecurityPolicy lets the pages load only their own files and talk
// only to their own node: no inline script or style, nothing from
// elsewhere, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the UI's files under Prefix; Prefix itself is the single
// page, index.html. Other paths answer 404.
func Handler() http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		// The embedded tree always has static/: a build without it
		// does not compile.
		return http.NotFoundHandler()
	}
	fileServer := http.StripPrefix(Prefix, http.FileServerFS(static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if !strings.HasPrefix(r.URL.Path, Prefix) || strings.HasSuffix(r.URL.Path, "/index.html") {
			// FileServer redirects index.html to the directory; the one
			// page is Prefix.
			http.Redirect(w, r, Prefix, http.StatusFound)
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}
