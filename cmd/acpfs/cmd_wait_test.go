package main

import (
	"encoding/json"
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
	start := time.Now()
	r := runCLI(t, "wait", "--folder", dir, "--participant", "reader", "--timeout", "0.3", "--interval", "0.1")
	assert.Equal(t, exitWarnings, r.code)
	assert.Contains(t, r.out, "waiting: waiting for server after seq 1\n")
	assert.Contains(t, r.errOut, "timeout: waiting for server after seq 1\n")
	assert.Less(t, time.Since(start), 5*time.Second)

	r = runCLI(t, "wait", "--folder", dir, "--participant", "mallory", "--timeout", "1")
	assert.Equal(t, exitFailed, r.code)
}

// TestWaitCommandWakesOnAppend checks that wait returns as soon as
// another writer hands the turn over, without polling.
func TestWaitCommandWakesOnAppend(t *testing.T) {
	dir := protoInitFolder(t)
	done := make(chan cliResult, 1)
	go func() { done <- runCLI(t, "wait", "--folder", dir, "--participant", "reader", "--timeout", "20") }()

	time.Sleep(200 * time.Millisecond)
	l, err := protocol.OpenLog(dir)
	require.NoError(t, err)
	_, err = l.Append(protocol.EventSpec{Participant: "server", Event: "deliverable_drafted", Summary: "d", Doc: "deliverables/design-spec.md", ReplyTo: protoIntp(1), Role: "primary"})
	require.NoError(t, err)
	select {
	case r := <-done:
		t.Fatalf("wait returned before reader had the turn: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	handed := time.Now()
	_, err = l.Append(protocol.EventSpec{Participant: "server", Event: "proposal_submitted", Summary: "p", Doc: "proposal.md", ReplyTo: protoIntp(2)})
	require.NoError(t, err)
	select {
	case r := <-done:
		assert.Equal(t, exitOK, r.code, "%v", r.err)
		assert.Contains(t, r.out, "ready: reader is listed in waitingFor")
		assert.Contains(t, r.out, "phase: reviewing")
		assert.Less(t, time.Since(handed), 2*time.Second, "woken by the file change, not by a poll")
	case <-time.After(15 * time.Second):
		t.Fatal("wait did not wake up")
	}
}
