// Package integration drives acpfs through real FUSE mounts with ordinary
// tools and raw system calls. Tests that need FUSE skip with a message
// when it is unavailable, and fail instead when ACPFS_REQUIRE_FUSE=1.
package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/acpfs/acpfs/internal/testutil"
)

// acpfsBin is the CLI built once for the whole package.
var acpfsBin string

// tmpRoot prefixes every directory the tests create, so that the final
// check can tell our mounts from anyone else's.
var tmpRoot string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	tmpRoot, err = os.MkdirTemp("", "acpfs-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpRoot)
	// The CLI's state caches go with the run, not to the user's cache
	// directory.
	os.Setenv("ACPFS_STATE_CACHE_DIR", filepath.Join(tmpRoot, "state-cache"))
	acpfsBin = filepath.Join(tmpRoot, "acpfs")
	if err := testutil.InstallCLI(acpfsBin, "../cmd/acpfs"); err != nil {
		fmt.Fprintln(os.Stderr, "build acpfs:", err)
		return 1
	}
	// The README's several-hosts example runs a JetStream server.
	natsBuild := exec.Command("go", "build", "-o", filepath.Join(tmpRoot, "acpfs-nats"), "../cmd/acpfs-nats")
	natsBuild.Stdout, natsBuild.Stderr = os.Stdout, os.Stderr
	if err := natsBuild.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build acpfs-nats:", err)
		return 1
	}
	code := m.Run()
	if err := testutil.DetachLeftovers(tmpRoot); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return code
}

// leftoverMounts lists FUSE mounts under tmpRoot.
func leftoverMounts() []string { return testutil.FUSEMounts(tmpRoot) }
