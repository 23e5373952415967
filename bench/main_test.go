package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/acpfs/acpfs/internal/testutil"
)

// enabled is true when the harness may mount and spend minutes.
var enabled = os.Getenv("ACPFS_BENCH") == "1"

var (
	// tmpRoot holds every file, folder and mountpoint of the run; it is
	// removed at the end, after every mount under it is gone.
	tmpRoot string
	// acpfsBin and loopbackBin are built once per run.
	acpfsBin    string
	loopbackBin string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if !enabled {
		return m.Run()
	}
	var err error
	// Large files go to /tmp explicitly, not to a TMPDIR that may be
	// small or slow.
	if tmpRoot, err = os.MkdirTemp("/tmp", "acpfs-bench-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpRoot)
	// `acpfs append` keeps its state caches with the run.
	os.Setenv("ACPFS_STATE_CACHE_DIR", filepath.Join(tmpRoot, "state-cache"))
	acpfsBin = filepath.Join(tmpRoot, "bin", "acpfs")
	loopbackBin = filepath.Join(tmpRoot, "bin", "loopback")
	for bin, pkg := range map[string]string{acpfsBin: "../cmd/acpfs", loopbackBin: "./loopback"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		// Static, as `make build` makes it (see the Makefile).
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			return 1
		}
	}
	code := m.Run()
	if err := writeReport(); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		code = 1
	}
	if err := testutil.DetachLeftovers(tmpRoot + "/"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return code
}
