package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps the checkpoints of `acpfs append` (see
// protocol.DefaultCheckpointPath) in a directory of the test run.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "acpfs-cmd-checkpoints-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("ACPFS_CHECKPOINT_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
