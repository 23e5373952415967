package view

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlaceNames: a view rooted at the repository turns its paths into
// the folder-relative names the grant and the ledger speak of, and back.
func TestPlaceNames(t *testing.T) {
	deep := newPlace("a/collab")
	tests := []struct {
		at         place
		vp, name   string
		aboveOrAt  bool
		parentName string
	}{
		{place{}, "", "", true, ""},
		{place{}, "notes/a.md", "notes/a.md", false, "notes"},
		{newPlace("collab"), "", "..", true, ".."},
		{newPlace("collab"), "collab", "", true, ".."},
		{newPlace("collab"), "collab/events.jsonl", "events.jsonl", false, ""},
		{newPlace("collab"), "docs/report.md", "../docs/report.md", false, "../docs"},
		{newPlace("collab"), "collab2/x", "../collab2/x", false, "../collab2"},
		{newPlace("collab"), "main.go", "../main.go", false, ".."},
		{deep, "", "../..", true, "../.."},
		{deep, "a", "..", true, "../.."},
		{deep, "a/collab", "", true, ".."},
		{deep, "a/collab/x", "x", false, ""},
		{deep, "a/y", "../y", false, ".."},
		{deep, "b/z", "../../b/z", false, "../../b"},
	}
	for _, tt := range tests {
		name := tt.at.nameOf(tt.vp)
		assert.Equal(t, tt.name, name, "nameOf(%q) within %q", tt.vp, tt.at.within)
		vp, ok := tt.at.viewPath(name)
		assert.True(t, ok, name)
		assert.Equal(t, tt.vp, vp, "viewPath(%q) within %q", name, tt.at.within)
		assert.Equal(t, tt.aboveOrAt, aboveFolder(name), "aboveFolder(%q)", name)
		assert.Equal(t, tt.parentName, tt.at.parentName(name), "parentName(%q) within %q", name, tt.at.within)
	}
	_, ok := newPlace("collab").viewPath("../../x")
	assert.False(t, ok, "above the view's root")
	_, ok = place{}.viewPath("../x")
	assert.False(t, ok, "a view rooted at the folder has nothing beside it")
	assert.Equal(t, "..", newPlace("collab").up)
	assert.Equal(t, "../..", deep.up)
}

// TestPlaceJoin: below an ancestor of the folder, the entry on the way
// to it has a shorter name; elsewhere a name is its directory's name and
// its own.
func TestPlaceJoin(t *testing.T) {
	deep := newPlace("a/collab")
	tests := []struct {
		at              place
		dir, name, want string
	}{
		{place{}, "", "x", "x"},
		{place{}, "d", "x", "d/x"},
		{newPlace("collab"), "..", "collab", ""},
		{newPlace("collab"), "..", "docs", "../docs"},
		{newPlace("collab"), "../docs", "a.md", "../docs/a.md"},
		{newPlace("collab"), "", "events.jsonl", "events.jsonl"},
		{deep, "../..", "a", ".."},
		{deep, "../..", "b", "../../b"},
		{deep, "..", "collab", ""},
		{deep, "..", "y", "../y"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.at.join(tt.dir, tt.name), "join(%q, %q) within %q", tt.dir, tt.name, tt.at.within)
	}
}

func TestPlaceOf(t *testing.T) {
	for _, bad := range []string{"/abs", "..", "../x", "a/../b", "a/", "./a", "."} {
		_, err := placeOf(bad)
		assert.Error(t, err, bad)
	}
	p, err := placeOf("a/collab")
	require.NoError(t, err)
	assert.Equal(t, "../..", p.up)
}

// TestPlaceKeyName: an external deliverable, which the protocol names by
// its absolute path, is named beside the folder in a view that shows it.
func TestPlaceKeyName(t *testing.T) {
	p := newPlace("collab")
	p.folder = "/repo/collab"
	assert.Equal(t, "../docs/report.md", p.keyName("/repo/docs/report.md"))
	assert.Equal(t, "deliverables/a.md", p.keyName("deliverables/a.md"))
	assert.Equal(t, "/elsewhere/x.md", p.keyName("/elsewhere/x.md"), "beyond the view's root")
	assert.Equal(t, "/repo/docs/x.md", place{}.keyName("/repo/docs/x.md"))
}
