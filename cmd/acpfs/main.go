// Command acpfs enforces the Agent Collaboration Protocol and per-agent
// context grants at the filesystem.
package main

import (
	"fmt"
	"os"

	"github.com/acpfs/acpfs/mount"
)

func main() {
	if os.Getenv(mount.ExecShimEnv) == "1" {
		err := mount.ExecShim(os.Args[1:])
		fmt.Fprintf(os.Stderr, "acpfs run: %v\n", err)
		os.Exit(127)
	}
	os.Exit(execute(os.Args[1:]))
}
