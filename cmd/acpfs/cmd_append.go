package main

import (
	"fmt"
	"log/slog"

	"github.com/acpfs/acpfs/protocol"
	"github.com/spf13/cobra"
)

func init() { registerPerEvent("append", newAppendCmd) }

// appendLong is the help of acpfs append.
const appendLong = `Append one event to events.jsonl after checking it against the ACP state
machine and the folder's documents, then update protocol.json. A refused
event changes nothing; the reason (file, line, rule) goes to stderr and
the exit code is 2.

The state derived from the history is kept between runs in a state cache
($ACPFS_STATE_CACHE_DIR, default acpfs/state-cache in the user's cache
directory), used only while events.jsonl is the same file, ends with the
same line and protocol.json declares the same collaboration: each run then
reads only what was appended since the last one.

With --store the collaboration is served from several hosts: the event is
checked against the folder caught up with the store, and appended only if
the store takes it as the next line (an append from another host that
went in first makes this one catch up and check again).`

// appendFlags are the flags of acpfs append.
type appendFlags struct {
	folder  string
	spec    protocol.EventSpec
	replyTo int
	sf      storeFlags
}

func newAppendCmd() *cobra.Command {
	var af appendFlags
	cmd := &cobra.Command{
		Use:   "append",
		Short: "Append a validated ACP event to events.jsonl",
		Long:  appendLong,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return af.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&af.folder, "folder", "", "collaboration folder")
	f.StringVar(&af.spec.Participant, "participant", "", "participant id writing the event")
	f.StringVar(&af.spec.Event, "event", "", "event name: "+joinComma(protocol.EventNames))
	f.StringVar(&af.spec.Summary, "summary", "", "short event summary")
	f.StringVar(&af.spec.Doc, "doc", "", "document path relative to the folder (external:<file> for external deliverables)")
	f.IntVar(&af.replyTo, "reply-to", 0, "seq of the earlier event this one responds to")
	f.StringVar(&af.spec.Role, "role", "", "deliverable role for deliverable_* events: primary or supporting")
	f.StringVar(&af.spec.SHA256, "sha256", "", "64 lowercase hex digits: SHA-256 of the deliverable, for deliverable_frozen")
	af.sf.register(cmd)
	for _, name := range []string{"folder", "participant", "event", "summary"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// run checks the event's names, opens the folder's log (caught up with
// the store under --store) and appends the event.
func (af *appendFlags) run(cmd *cobra.Command) error {
	spec := af.spec
	if err := protoChoice("event", spec.Event, protocol.EventNames); err != nil {
		return err
	}
	if spec.Role != "" {
		if err := protoChoice("role", spec.Role, []string{protocol.RolePrimary, protocol.RoleSupporting}); err != nil {
			return err
		}
	}
	dir, err := protoFolder(af.folder)
	if err != nil {
		return withCode(exitFailed, err)
	}
	// One process per event: start from the state the last one derived,
	// when the folder is still as it left it.
	cache := protocol.DefaultStateCachePath(dir)
	l, err := protocol.OpenLogCached(dir, cache)
	if err != nil {
		return withCode(exitFailed, err)
	}
	defer l.Close()
	closeStore, err := af.catchUp(cmd, dir, l)
	defer closeStore()
	if err != nil {
		return withCode(exitFailed, err)
	}
	if cmd.Flags().Changed("reply-to") {
		spec.ReplyTo = &af.replyTo
	}
	// The state as read is saved while the append runs: the two synced
	// writes (state cache, protocol.json) reach the disk together.
	saved := l.StartStateCache(cache)
	ev, err := l.Append(spec)
	if cerr := saved(); cerr != nil {
		slog.Debug("state cache not saved", "path", cache, "err", cerr)
	}
	if err != nil {
		return withCode(exitFailed, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "appended seq %d: %s\n", ev.Seq, ev.Event)
	return nil
}

// catchUp makes l append through the store of --store, caught up with
// it; without --store it refuses a folder that a store's host keeps.
// closeStore (never nil) closes the store's connection.
func (af *appendFlags) catchUp(cmd *cobra.Command, dir string, l *protocol.Log) (closeStore func(), err error) {
	closeStore = func() {}
	st, err := af.sf.open(cmd.Context(), false)
	if err != nil {
		return closeStore, err
	}
	if st == nil {
		return closeStore, refuseStoreFolder(dir)
	}
	closeStore = func() { st.Close() }
	l.SetReplica(st.Events())
	_, err = l.Pull()
	return closeStore, err
}
