package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
)

// This file starts acpfs daemons (`acpfs mount`, `acpfs up`) as separate
// processes of the built binary (through testutil.StartDaemon), so that
// tests can kill them like a crash would and drive their views from this
// process without the vfork hazard of serving a view to oneself. Names
// carry a "pm" prefix.

// pmStart execs acpfs with args and waits until every path in ready
// answers stat (a mountpoint's .acpfs/status). Cleanup stops the process
// with SIGTERM and fails the test if it exited with an error or left any
// of mounts behind.
func pmStart(t testing.TB, mounts, ready []string, args ...string) *testutil.Daemon {
	t.Helper()
	// Each says it is ready once every view is mounted, probe done.
	said := map[string]string{"mount": "mounted ", "up": " view(s) of "}[args[0]]
	return testutil.StartDaemon(t, testutil.DaemonSpec{Bin: acpfsBin, Args: args, Mounts: mounts, Ready: ready, ReadyOutput: said})
}

// pmMount starts `acpfs mount` for one grant file and waits for the view.
func pmMount(t testing.TB, folder, grantPath, ledgerPath, mountpoint string, extra ...string) *testutil.Daemon {
	t.Helper()
	require.NoError(t, os.MkdirAll(mountpoint, 0o755))
	args := append([]string{"mount", "--folder", folder, "--grant", grantPath, "--ledger", ledgerPath}, extra...)
	args = append(args, mountpoint)
	return pmStart(t, []string{mountpoint}, []string{filepath.Join(mountpoint, ".acpfs", "status")}, args...)
}

// pmUp starts `acpfs up` and waits until the view of every agent answers.
func pmUp(t testing.TB, runs, folder, root string, agents []string) *testutil.Daemon {
	t.Helper()
	require.NoError(t, os.MkdirAll(root, 0o755))
	var mounts, ready []string
	for _, a := range agents {
		mounts = append(mounts, filepath.Join(root, a))
		ready = append(ready, filepath.Join(root, a, ".acpfs", "status"))
	}
	return pmStart(t, mounts, ready, "up", "--runs", runs, "--folder", folder, "--root", root)
}

// pmWriteGrant stores g as runs/context_grants/<id>.json and returns the path.
func pmWriteGrant(t testing.TB, runs string, g *grants.Grant) string {
	t.Helper()
	dir := mkRunDir(t, runs)
	b, err := json.MarshalIndent(g, "", "  ")
	require.NoError(t, err)
	p := filepath.Join(dir, g.GrantID+".json")
	require.NoError(t, os.WriteFile(p+".tmp", b, 0o644))
	require.NoError(t, os.Rename(p+".tmp", p))
	return p
}

// pmEvent is the subset of an event line the tests look at.
type pmEvent struct {
	Seq     int    `json:"seq"`
	From    string `json:"from"`
	Event   string `json:"event"`
	At      string `json:"at"`
	Summary string `json:"summary"`
}

// pmLine builds one event line (without newline).
func pmLine(seq int, from, event, summary string, at time.Time, extra map[string]any) string {
	ev := map[string]any{"seq": seq, "from": from, "event": event, "at": at.UTC().Format("2006-01-02T15:04:05Z"), "summary": summary}
	if seq > 1 {
		ev["reply_to"] = seq - 1
	}
	for k, v := range extra {
		ev[k] = v
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// pmAppend appends line with one write(2) and a close(2), as `echo >>`
// does, and returns the first errno (0 when both succeeded, which is what
// acknowledges an append to its writer).
func pmAppend(path, line string) syscall.Errno {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return pmErrno(err)
	}
	_, werr := f.Write([]byte(line + "\n"))
	cerr := f.Close()
	if werr != nil {
		return pmErrno(werr)
	}
	return pmErrno(cerr)
}

// pmErrno extracts the errno of err; an error without one is EIO.
func pmErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// pmParseEvents checks that data is whole event lines and returns them.
// An error names the first line that does not parse or the torn end.
func pmParseEvents(data []byte) ([]pmEvent, error) {
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("events.jsonl does not end with a newline (last %q)", pmTail(data))
	}
	var out []pmEvent
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(data) == 0 {
			break
		}
		var ev pmEvent
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&ev); err != nil || dec.More() {
			return nil, fmt.Errorf("line %d does not parse (%v): %q", i+1, err, line)
		}
		out = append(out, ev)
	}
	return out, nil
}

func pmTail(b []byte) []byte {
	if len(b) > 80 {
		return b[len(b)-80:]
	}
	return b
}

// pmRequireSeqs fails unless evs carry seq 1, 2, 3... without a gap.
func pmRequireSeqs(t testing.TB, evs []pmEvent) {
	t.Helper()
	for i, ev := range evs {
		require.Equal(t, i+1, ev.Seq, "line %d carries seq %d", i+1, ev.Seq)
	}
}

// pmLedgerRecords reads every record of the ledger (which must parse).
func pmLedgerRecords(t testing.TB, path string) []ledger.Record {
	t.Helper()
	var recs []ledger.Record
	require.NoError(t, ledger.Scan(path, ledger.Filter{}, func(r ledger.Record) error {
		recs = append(recs, r)
		return nil
	}))
	return recs
}

// pmRequireLedgerMatchesEvents checks that the ledger holds exactly one
// append_accepted record per event line from seq `from` on, and none for
// a line that is not there.
func pmRequireLedgerMatchesEvents(t testing.TB, recs []ledger.Record, evs []pmEvent, from int) {
	t.Helper()
	got := map[string]int{}
	for _, r := range recs {
		if r.Kind == ledger.KindAppendAccepted {
			got[r.Detail]++
		}
	}
	want := map[string]int{}
	for _, ev := range evs {
		if ev.Seq >= from {
			want[fmt.Sprintf("seq %d %s", ev.Seq, ev.Event)]++
		}
	}
	require.Equal(t, want, got, "append_accepted records and event lines differ")
}

// pmRequireLedgerValid runs `acpfs ledger verify` and returns its output.
func pmRequireLedgerValid(t testing.TB, path string) string {
	t.Helper()
	out, stderr, code := acpfs(t, "ledger", "verify", "--ledger", path)
	require.Equal(t, 0, code, "ledger verify: %s%s", out, stderr)
	return out
}

// mkRunDir makes the run directory runs and its context_grants, private
// (0700) as acpfs makes it: the commands make private a run directory of
// theirs that others may read, and say so. It returns context_grants.
func mkRunDir(t testing.TB, runs string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(runs), 0o755))
	if err := os.Mkdir(runs, 0o700); err != nil && !os.IsExist(err) {
		require.NoError(t, err)
	}
	dir := filepath.Join(runs, "context_grants")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}
