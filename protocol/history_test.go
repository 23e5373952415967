package protocol

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistoryProblemNamesTheFirstBadLine(t *testing.T) {
	folder := filepath.Join(t.TempDir(), "f")
	_, err := Init(InitOptions{Folder: folder, Participants: []string{"alice", "bob"}, Objective: "o",
		Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	l, err := OpenLog(folder)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Refresh())
	assert.Empty(t, l.HistoryProblem())

	f, err := os.OpenFile(filepath.Join(folder, EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("not json\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, l.Refresh())
	assert.Contains(t, l.HistoryProblem(), "line 2")
}
