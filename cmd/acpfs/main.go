// Command acpfs enforces the Agent Collaboration Protocol and per-agent
// context grants at the filesystem.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:]))
}
