package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/acpfs/acpfs/protocol"
	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"
)

func init() { registerPerEvent("wait", newWaitCmd) }

// protoWaitReport is the --json form of `acpfs wait`.
type protoWaitReport struct {
	Ready  bool             `json:"ready"`
	Reason string           `json:"reason"`
	Status *protocol.Status `json:"status,omitempty"`
}

func newWaitCmd() *cobra.Command {
	var folder, participant string
	var timeout, interval float64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Block until a participant has the turn or the collaboration ends",
		Long: `Block until the participant is listed in waitingFor or the phase is
completed or blocked, then print the next action. The folder is watched
with fsnotify, so the command wakes as soon as events.jsonl or
protocol.json changes. Exit 1 when --timeout expires.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := protoFolder(folder)
			if err != nil {
				return withCode(exitFailed, err)
			}
			return protoWait(cmd, dir, participant, time.Duration(timeout*float64(time.Second)), asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&folder, "folder", "", "collaboration folder")
	f.StringVar(&participant, "participant", "", "participant id")
	f.Float64Var(&timeout, "timeout", 0, "maximum seconds to wait; 0 waits forever")
	f.Float64Var(&interval, "interval", 2, "accepted for compatibility; changes are watched, not polled")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	_ = f.MarkHidden("interval")
	_ = cmd.MarkFlagRequired("folder")
	_ = cmd.MarkFlagRequired("participant")
	return cmd
}

func protoWait(cmd *cobra.Command, dir, participant string, timeout time.Duration, asJSON bool) error {
	out := cmd.OutOrStdout()
	// Watch before the first check, so no change between them is missed.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return withCode(exitFailed, fmt.Errorf("watch %s: %w", dir, err))
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return withCode(exitFailed, fmt.Errorf("watch %s: %w", dir, err))
	}
	l, err := protocol.OpenLog(dir)
	if err != nil {
		return withCode(exitFailed, err)
	}
	defer l.Close()
	if _, err := l.Status(participant); err != nil {
		return withCode(exitFailed, err)
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	var lastShown *protocol.Snapshot
	for {
		if err := l.Refresh(); err != nil {
			return withCode(exitFailed, err)
		}
		snap := l.Snapshot()
		ready, reason := protocol.Ready(snap, participant)
		if ready {
			st, err := l.Status(participant)
			if err != nil {
				return withCode(exitFailed, err)
			}
			if asJSON {
				return protoJSONOrFail(cmd, protoWaitReport{Ready: true, Reason: reason, Status: &st})
			}
			fmt.Fprintf(out, "ready: %s\n", reason)
			return protoPrintStatus(cmd, st, false)
		}
		if !asJSON && (lastShown == nil || lastShown.LastSeq != snap.LastSeq || lastShown.Phase != snap.Phase || !slices.Equal(lastShown.WaitingFor, snap.WaitingFor)) {
			fmt.Fprintf(out, "waiting: %s\n", reason)
			lastShown = &snap
		}
		if err := protoWaitChange(w, dir, deadline); err != nil {
			if err == errProtoTimeout {
				if asJSON {
					if err := protoJSONOrFail(cmd, protoWaitReport{Ready: false, Reason: reason}); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "timeout: %s\n", reason)
				}
				return silentExit(exitWarnings)
			}
			return withCode(exitFailed, err)
		}
	}
}

var errProtoTimeout = fmt.Errorf("timeout")

// protoWaitChange blocks until events.jsonl or protocol.json changes, the
// deadline passes, or the watcher fails.
func protoWaitChange(w *fsnotify.Watcher, dir string, deadline <-chan time.Time) error {
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("file watcher closed")
			}
			switch filepath.Base(ev.Name) {
			case protocol.EventsFile, protocol.ProtocolFile:
				return nil
			}
			if ev.Name == dir {
				return nil // the folder itself went away: the next check reports it
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("file watcher closed")
			}
			return fmt.Errorf("watch folder: %w", err)
		case <-deadline:
			return errProtoTimeout
		}
	}
}

func protoJSONOrFail(cmd *cobra.Command, v any) error {
	if err := protoPrintJSON(cmd.OutOrStdout(), v); err != nil {
		return withCode(exitFailed, err)
	}
	return nil
}
