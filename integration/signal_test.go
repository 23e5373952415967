package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// TestMountStopsOnEarlySIGTERM stops `acpfs mount` the moment its view
// answers, as a supervisor may: the daemon must unmount and exit cleanly
// every time, never leave a dead mount behind.
func TestMountStopsOnEarlySIGTERM(t *testing.T) {
	c := newCollab(t)
	gp := c.writeGrant(ownerGrant())
	for i := 0; i < 5; i++ {
		mnt := filepath.Join(c.root, "mnt-early")
		require.NoError(t, os.MkdirAll(mnt, 0o755))
		p := pmMount(t, c.folder, gp, c.ledger, mnt)
		assert.NoError(t, p.Stop(), "run %d: %s", i, p.Output())
		assert.False(t, testutil.Mounted(mnt), "run %d: the mount survived its daemon", i)
	}
}
