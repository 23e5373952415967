package main

import (
	"fmt"
	"io"
	"os"

	"github.com/acpfs/acpfs/internal/limits"
	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/mount"
)

// doctorRun reports, apart from mounting, whether this user can start
// `acpfs run` sandboxes, with which uid scheme and which limits.
func doctorRun(out io.Writer, d mount.Doctor) {
	if d.Root {
		fmt.Fprintln(out, "run: ready (as root)")
		fmt.Fprintf(out, "run uid scheme: root (each grant gets a uid of its own from %d-%d, host registry %s)\n", sandbox.UIDMin, sandbox.UIDMax, sandbox.HostRegistryDir)
		if limits.V1() {
			fmt.Fprintln(out, "run limits: cgroup v1 (memory, pids, cpu; socket buffers capped apart)")
		} else {
			fmt.Fprintln(out, "run limits: cgroup v2 (memory, pids, cpu)")
		}
		return
	}
	if err := rootlessReady(); err != nil {
		fmt.Fprintf(out, "run: cannot start a sandbox: %v\n", err)
	} else {
		fmt.Fprintln(out, "run: ready without root (in a user namespace)")
	}
	ns, _ := sandbox.ProbeUserNS("")
	if reg, err := ns.Registry(); err == nil {
		fmt.Fprintf(out, "run uid scheme: subuid (each grant gets a subordinate uid of uid %d, %d-%d, through newuidmap: it cannot open your files; registry %s)\n", os.Getuid(), reg.Min, reg.Max, reg.Dir)
	} else if ns.Scheme == sandbox.SchemeSubUID {
		fmt.Fprintf(out, "run uid scheme: none: %v\n", err)
	} else {
		fmt.Fprintf(out, "run uid scheme: single (%s): the agent runs as your own uid %d, kept from your files by the namespaces and Landlock alone; "+
			"give this user a range in /etc/subuid and /etc/subgid and install newuidmap for a uid of its own\n", ns.Why, os.Getuid())
	}
	if dir, err := sandbox.DelegatedCgroup(); err == nil {
		fmt.Fprintf(out, "run limits: cgroup v2, in the delegated group %s (memory, pids, cpu)\n", dir)
	} else {
		fmt.Fprintf(out, "run limits: none: %v; acpfs run says so and runs without limits, or refuses --memory, --pids, --cpu (pass --no-limits)\n", err)
	}
}
