package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestHandler checks what the UI's files are served with: the single page
// at Prefix under a policy that keeps it to its own node, its files, a
// redirect for index.html and anything outside Prefix, and 404 for the
// rest.
func TestHandler(t *testing.T) {
	h := Handler()
	cases := []struct {
		path     string
		code     int
		body     string
		location string
		ctype    string
	}{
		{path: "/ui/", code: 200, body: `<script src="app.js" defer></script>`, ctype: "text/html"},
		{path: "/ui/app.js", code: 200, body: "function refresh()", ctype: "javascript"},
		{path: "/ui/app.css", code: 200, body: ".cell", ctype: "text/css"},
		{path: "/ui/index.html", code: http.StatusFound, location: "/ui/"},
		{path: "/", code: http.StatusFound, location: "/ui/"},
		{path: "/ui/nope.js", code: 404},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("%s: %d, want %d", tc.path, rec.Code, tc.code)
		}
		if !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s: body lacks %q", tc.path, tc.body)
		}
		if got := rec.Header().Get("Location"); got != tc.location {
			t.Errorf("%s: Location %q, want %q", tc.path, got, tc.location)
		}
		if got := rec.Header().Get("Content-Type"); !strings.Contains(got, tc.ctype) {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", tc.path, csp)
		}
	}
}

// TestFilesLoadNothingFromElsewhere: no file names another origin, and no
// markup carries inline script, style or event handlers (the policy would
// refuse them).
func TestFilesLoadNothingFromElsewhere(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)(<script>|<style|\sstyle=|\son[a-z]+=)`)
	n := 0
	err := fs.WalkDir(files, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s names another origin: %s", path, m)
		}
		if m := inline.Find(b); m != nil {
			t.Errorf("%s has inline markup the policy refuses: %s", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("only %d files embedded", n)
	}
}
