package testutil

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// CLIEnv names the acpfs binary `make test` built once (bin/acpfs) for
// every test package that runs the CLI: each linking its own took tens
// of seconds of a loaded machine.
const CLIEnv = "ACPFS_TEST_BIN"

// InstallCLI puts the acpfs CLI at dst (mode 0755): a copy of $CLIEnv
// when set, so that it lives where the test expects it and a later `make
// build` does not change it under a running test, else a go build of the
// package in pkgDir.
func InstallCLI(dst, pkgDir string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	src := os.Getenv(CLIEnv)
	if src == "" {
		out, err := exec.Command("go", "build", "-o", dst, pkgDir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkgDir, err, out)
		}
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%s: %w", CLIEnv, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}
