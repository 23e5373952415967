package main

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpfs/acpfs/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaitCommandReadyAtOnce(t *testing.T) {
	dir := protoInitFolder(t)
	r := runCLI(t, "wait", "--folder", dir, "--participant", "server", "--timeout", "5")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	assert.Contains(t, r.out, "ready: server is listed in waitingFor\nphase: drafting\n")
	assert.Contains(t, r.out, "next action: draft the primary deliverable")

	r = runCLI(t, "wait", "--folder", dir, "--participant", "server", "--json")
	require.Equal(t, exitOK, r.code)
	var rep protoWaitReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	assert.True(t, rep.Ready)
	assert.Equal(t, "drafting", rep.Status.Phase)
}

func TestWaitCommandTimeout(t *testing.T) {
	dir := protoInitFolder(t)
	r := runCLI(t, "wait", "--folder", dir, "--participant", "reader", "--timeout", "0.3", "--interval", "0.1")
	assert.Equal(t, exitWarnings, r.code)
	assert.Contains(t, r.out, "waiting: waiting for server after seq 1\n")
	assert.Contains(t, r.errOut, "timeout: waiting for server after seq 1\n")

	r = runCLI(t, "wait", "--folder", dir, "--participant", "mallory", "--timeout", "1")
	assert.Equal(t, exitFailed, r.code)
}

// TestWaitCommandWakesOnAppend checks that wait returns once another
// writer hands the turn over, and not before: each change it sees before
// that is shown as a new "waiting:" line, which is how the test knows
// where it is (wait watches the folder; it has no poll to wake it).
func TestWaitCommandWakesOnAppend(t *testing.T) {
	dir := protoInitFolder(t)
	out := newLineWatch()
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetOut(out)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"wait", "--folder", dir, "--participant", "reader", "--timeout", "60"})
		done <- root.Execute()
	}()
	out.await(t, "waiting: waiting for server after seq 1")
	l, err := protocol.OpenLog(dir)
	require.NoError(t, err)
	_, err = l.Append(protocol.EventSpec{Participant: "server", Event: "deliverable_drafted", Summary: "d", Doc: "deliverables/design-spec.md", ReplyTo: protoIntp(1), Role: "primary"})
	require.NoError(t, err)
	out.await(t, "waiting: waiting for server after seq 2")
	_, err = l.Append(protocol.EventSpec{Participant: "server", Event: "proposal_submitted", Summary: "p", Doc: "proposal.md", ReplyTo: protoIntp(2)})
	require.NoError(t, err)
	select {
	case err := <-done:
		assert.Equal(t, exitOK, exitCodeOf(err), "%v", err)
		out.await(t, "ready: reader is listed in waitingFor")
		out.await(t, "phase: reviewing")
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not wake up")
	}
}

// lineWatch is a writer whose lines a test can wait for.
type lineWatch struct {
	mu      sync.Mutex
	buf     strings.Builder
	changed chan struct{}
}

func newLineWatch() *lineWatch { return &lineWatch{changed: make(chan struct{})} }

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

// await blocks until the output holds a line starting with prefix.
func (w *lineWatch) await(t *testing.T, prefix string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		text, changed := w.buf.String(), w.changed
		w.mu.Unlock()
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, prefix) {
				return
			}
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no line %q in:\n%s", prefix, text)
		}
	}
}
