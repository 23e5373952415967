package protocol

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReconcileRepairsProtocolJSONAfterCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "collab")
	_, err := Init(InitOptions{Folder: dir, Participants: []string{"alice", "bob"}, Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	stale, err := os.ReadFile(filepath.Join(dir, "protocol.json"))
	require.NoError(t, err)

	l, err := OpenLog(dir)
	require.NoError(t, err)
	one := 1
	_, err = l.Append(EventSpec{Participant: "alice", Event: "blocked", Summary: "stop", ReplyTo: &one})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	// A crash between the event line and the protocol.json rewrite.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "protocol.json"), stale, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".protocol.json.tmp-123"), []byte("{"), 0o644))
	assert.Equal(t, 2, Validate(dir).ExitCode())

	l, err = OpenLog(dir)
	require.NoError(t, err)
	defer l.Close()
	changed, err := l.Reconcile()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 0, Validate(dir).ExitCode(), Validate(dir).Errors)
	_, err = os.Stat(filepath.Join(dir, ".protocol.json.tmp-123"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	changed, err = l.Reconcile()
	require.NoError(t, err)
	assert.False(t, changed, "nothing to do the second time")
}
