package main

import (
	"fmt"
	"github.com/acpfs/acpfs/grants"
	"os"
	"sort"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/internal/sandbox"
)

func init() {
	register(newRunUsernsCmd)
}

// uidSchemeHelp says what each uid scheme of a run without root gives.
const uidSchemeHelp = "without root: how the agent's uid is mapped. " + sandbox.SchemeSubUID + ": a subordinate uid of yours " +
	"(/etc/subuid, newuidmap), another uid on the host, to which your files are closed; " + sandbox.SchemeSingle + ": your own uid, " +
	"kept from your files by the namespaces and Landlock alone, which can write a --rw directory of yours as it is. " +
	"Default: " + sandbox.SchemeSubUID + " where the host offers it"

// homeHelp says where the agent's home is and who sees it.
const homeHelp = "the agent's home, shown at $HOME (the caller's HOME path) and owned by the agent's uid: by default " +
	"RUNS/" + sandbox.HomesDir + "/<grant id>, made at the first run and kept between runs (logins, sessions and settings " +
	"of agent CLIs live there); no other agent can reach it. A DIR of yours is shown owned by the agent (idmapped; without root, only in the " + sandbox.SchemeSingle + " uid scheme); " +
	"'" + sandbox.HomeNone + "': no home of its own (HOME is /tmp unless the sandbox shows the caller's)"

// planRunHome adds the agent's home to binds (at its sorted place) and
// gives each writable bind the agent's uid does not own an idmapping
// (refused without root); it returns the binds, the home's path in the
// sandbox ("" for none) and the home a rootless run's daemon gives to the
// agent ("" for none).
func planRunHome(flag, runDir, grantID, folder string, masks []string, binds []sandbox.Bind, ids *runIDs, rootless bool) ([]sandbox.Bind, string, string, error) {
	at, give := "", ""
	if flag != sandbox.HomeNone {
		o := sandbox.HomeOptions{Dir: flag, At: os.Getenv("HOME"), Folder: folder, Masks: masks, Binds: binds}
		if flag == "" {
			o.Dir, o.Default = sandbox.DefaultHome(runDir, grantID), true
			var err error
			if rootless {
				give, err = rootlessHome(o.Dir, &ids.ns)
			} else if err = sandbox.EnsureHome(o.Dir, ids.hostU, ids.hostG); err != nil {
				err = withCode(exitMount, err)
			}
			if err != nil {
				return nil, "", "", err
			}
		}
		b, err := sandbox.PlanHome(o)
		if err != nil {
			return nil, "", "", err
		}
		binds = append(binds, b)
		sort.SliceStable(binds, func(i, j int) bool { return binds[i].Path < binds[j].Path })
		at = b.Path
	}
	if err := sandbox.MapWritable(binds, uint32(os.Getuid()), ids.hostU, ids.hostG); err != nil {
		return nil, "", "", withCode(exitMount, err)
	}
	if rootless {
		if err := refuseRootlessIDMaps(binds, runDir, grantID); err != nil {
			return nil, "", "", err
		}
	}
	return binds, at, give, nil
}

// newRunUsernsCmd is the helper that holds a user namespace while the
// run daemon opens it for an idmapped mount (see sandbox.OpenUserns).
func newRunUsernsCmd() *cobra.Command {
	return hiddenCmd(sandbox.UsernsHelper, "internal: holds a user namespace of acpfs run until its stdin closes", func(*cobra.Command) error {
		sandbox.HoldUserns()
		return nil
	})
}

// maxShownDirs bounds the walk refuseRunDirsShown makes of each directory
// a sandbox is shown.
const maxShownDirs = 200000

// refuseRunDirsShown refuses a --ro, --rw or --home directory that is,
// lies in or holds a run or ledger directory (another coordinator's; own
// names this run's, which the sandbox masks): the
// sandbox would show its grants, its handed-over copies (the oracle's
// among them), its agents' homes and, idmapped, its key.
func refuseRunDirsShown(ro, rw []string, home string, own ...string) error {
	type shown struct{ flag, path string }
	var all []shown
	for _, p := range ro {
		all = append(all, shown{"--ro", p})
	}
	for _, p := range rw {
		all = append(all, shown{"--rw", p})
	}
	if home != "" && home != sandbox.HomeNone {
		all = append(all, shown{"--home", home})
	}
	for _, s := range all {
		if fi, err := os.Stat(s.path); err != nil || !fi.IsDir() {
			continue // Plan judges it
		}
		if d, err := grants.CoordinatorDirAt(s.path); err == nil && d != "" {
			return fmt.Errorf("%s %s is, or lies in, a run or ledger directory (%s), which no sandbox may show", s.flag, s.path, d)
		}
		// This run's own run and ledger directories are masked (Plan).
		d, complete, err := grants.CoordinatorDirBelow(s.path, maxShownDirs, own...)
		switch {
		case err != nil:
			return fmt.Errorf("%s %s: %w", s.flag, s.path, err)
		case d != "":
			return fmt.Errorf("%s %s holds a run or ledger directory (%s), which no sandbox may show; show a directory that does not hold it", s.flag, s.path, d)
		case !complete:
			return fmt.Errorf("%s %s holds more than %d directories to check for run directories; show a smaller one", s.flag, s.path, maxShownDirs)
		}
	}
	return nil
}
