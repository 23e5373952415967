package main

import (
	"os"
	"sort"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/internal/sandbox"
)

func init() {
	commands = append(commands, newRunUsernsCmd)
}

// homeHelp says where the agent's home is and who sees it.
const homeHelp = "the agent's home, shown at $HOME (the caller's HOME path) and owned by the agent's uid: by default " +
	"RUNS/" + sandbox.HomesDir + "/<grant id>, made at the first run and kept between runs (logins, sessions and settings " +
	"of agent CLIs live there); no other agent can reach it. A DIR of yours is shown owned by the agent (idmapped); " +
	"'" + sandbox.HomeNone + "': no home of its own (HOME is /tmp unless the sandbox shows the caller's)"

// planRunHome adds the agent's home to binds (at its sorted place) and
// gives each writable bind the agent's uid does not own an idmapping; it
// returns the binds and the home's path in the sandbox ("" for none).
func planRunHome(flag, runDir, grantID, folder string, masks []string, binds []sandbox.Bind, uid, gid uint32) ([]sandbox.Bind, string, error) {
	at := ""
	if flag != sandbox.HomeNone {
		o := sandbox.HomeOptions{Dir: flag, At: os.Getenv("HOME"), Folder: folder, Masks: masks, Binds: binds}
		if flag == "" {
			o.Dir, o.Default = sandbox.DefaultHome(runDir, grantID), true
			if err := sandbox.EnsureHome(o.Dir, uid, gid); err != nil {
				return nil, "", withCode(exitMount, err)
			}
		}
		b, err := sandbox.PlanHome(o)
		if err != nil {
			return nil, "", err
		}
		binds = append(binds, b)
		sort.SliceStable(binds, func(i, j int) bool { return binds[i].Path < binds[j].Path })
		at = b.Path
	}
	if err := sandbox.MapWritable(binds, uint32(os.Getuid()), uid, gid); err != nil {
		return nil, "", withCode(exitMount, err)
	}
	return binds, at, nil
}

// newRunUsernsCmd is the helper that holds a user namespace while the
// run daemon opens it for an idmapped mount (see sandbox.OpenUserns).
func newRunUsernsCmd() *cobra.Command {
	return hiddenCmd(sandbox.UsernsHelper, "internal: holds a user namespace of acpfs run until its stdin closes", func(*cobra.Command) error {
		sandbox.HoldUserns()
		return nil
	})
}
