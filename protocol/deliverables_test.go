package protocol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogDeliverables: the primary and the supporting deliverables
// protocol.json names, by the folder-relative paths a view protects.
func TestLogDeliverables(t *testing.T) {
	folder := filepath.Join(t.TempDir(), "f")
	_, err := Init(InitOptions{Folder: folder, Participants: []string{"alice", "bob"},
		Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	p := filepath.Join(folder, ProtocolFile)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	m["deliverables"].(map[string]any)["supporting"] = []any{map[string]any{"type": "adr", "file": "adr.md"}}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))

	l, err := OpenLog(folder)
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, []string{"deliverables/design-spec.md", "deliverables/adr.md"}, l.Deliverables())
}
