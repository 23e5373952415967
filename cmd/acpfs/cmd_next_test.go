package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/acpfs/acpfs/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNextCommand(t *testing.T) {
	dir := protoInitFolder(t)
	r := runCLI(t, "next", "--folder", dir, "--participant", "server")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	assert.Equal(t, "phase: drafting\nproposal owner: server\nwaiting for: server\nlast event: seq 1 initialized from server\n"+
		"next action: draft the primary deliverable, append deliverable_drafted (role primary), update proposal.md, then append proposal_submitted\n", r.out)

	r = runCLI(t, "next", "--folder", dir, "--participant", "reader", "--json")
	require.Equal(t, exitOK, r.code)
	var st protocol.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &st))
	assert.Equal(t, "drafting", st.Phase)
	assert.Equal(t, []string{"server"}, st.WaitingFor)
	assert.Equal(t, 1, st.LastEvent.Seq)
	assert.Contains(t, st.Action, "wait")

	r = runCLI(t, "next", "--folder", dir, "--participant", "mallory")
	assert.Equal(t, exitFailed, r.code)
	assert.ErrorContains(t, r.err, "[participant]")

	// No events: the phase is unknown, like the reference (exit 1).
	require.NoError(t, os.WriteFile(filepath.Join(dir, "events.jsonl"), nil, 0o644))
	r = runCLI(t, "next", "--folder", dir, "--participant", "server")
	assert.Equal(t, exitWarnings, r.code)
	assert.Contains(t, r.out, "phase: none\n")
}

func TestNextCommandOwnerWaitsDuringReview(t *testing.T) {
	dir := protoInitFolder(t)
	l, err := protocol.OpenLog(dir)
	require.NoError(t, err)
	_, err = l.Append(protocol.EventSpec{Participant: "server", Event: "deliverable_drafted", Summary: "d", Doc: "deliverables/design-spec.md", ReplyTo: protoIntp(1), Role: "primary"})
	require.NoError(t, err)
	_, err = l.Append(protocol.EventSpec{Participant: "server", Event: "proposal_submitted", Summary: "p", Doc: "proposal.md", ReplyTo: protoIntp(2)})
	require.NoError(t, err)
	r := runCLI(t, "next", "--folder", dir, "--participant", "server")
	assert.Contains(t, r.out, "next action: wait for the reviewers; leave proposal.md and the deliverables alone")
	r = runCLI(t, "next", "--folder", dir, "--participant", "reader")
	assert.Contains(t, r.out, "next action: review proposal.md")
}
