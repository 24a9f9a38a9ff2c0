package adminui

import (
	"io/fs"
	"os"
	"strings"
	"testing"
)

// TestFS checks that the UI's file system always has an index.html: the
// Vite build's when it was embedded, else the fallback page saying how to
// build it.
func TestFS(t *testing.T) {
	b, err := fs.ReadFile(FS(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat("web/dist/index.html")
	if built := statErr == nil; built != Built() {
		t.Fatalf("Built() = %v, but web/dist/index.html exists: %v", Built(), built)
	}
	if Built() {
		if !strings.Contains(string(b), "/admin/assets/") {
			t.Fatalf("the built index.html does not load /admin/assets/: %s", b)
		}
		return
	}
	if !strings.Contains(string(b), "make admin-ui") {
		t.Fatalf("the fallback page does not say how to build the UI: %s", b)
	}
	if _, err := fs.ReadFile(FS(), "assets/x.js"); err == nil {
		t.Fatal("the fallback file system serves more than index.html")
	}
}
