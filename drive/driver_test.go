package drive

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/acpfs/acpfs/ledger"
)

// requireAgrees checks that a closed receipt's fields agree: an
// accepted event makes the turn count (appended, unless it could not
// run) and leaves nothing to tell a next attempt; a turn without one
// says why.
func requireAgrees(t *testing.T, rc *Receipt) {
	t.Helper()
	if len(rc.Events) > 0 {
		assert.Contains(t, []string{OutcomeAppended, OutcomeFailed}, rc.Outcome, rc.ID)
		assert.Empty(t, rc.LastError, "%s appended: nothing to tell a next attempt", rc.ID)
		return
	}
	assert.NotEqual(t, OutcomeAppended, rc.Outcome, rc.ID)
	assert.NotEmpty(t, rc.LastError, "%s appended nothing: its next attempt is told why", rc.ID)
}

// TestReceiptFieldsAgree: the outcome and the last error of a receipt,
// as the driver sets them when a turn ends, agree on the happy path, on
// a retry after a refusal, after a timeout, a limit, and for a turn a
// killed driver left running.
func TestReceiptFieldsAgree(t *testing.T) {
	refused := Refusal{Seq: 7, Kind: ledger.KindDenied, Op: ledger.OpOpen, Path: "proposal.md", Detail: "not writable under the grant"}
	hidden := Refusal{Seq: 8, Kind: ledger.KindDenied, Op: ledger.OpLookup, Path: "oracle", Detail: "hidden by grant"}
	appended := []EventRef{{Seq: 4, Type: "review_submitted"}}
	tests := []struct {
		name              string
		rc                Receipt
		runErr            error
		timedOut, stopped bool
		outcome, lastErr  string
	}{
		{name: "appended", rc: Receipt{Events: appended}, outcome: OutcomeAppended},
		{name: "appended after a refusal", rc: Receipt{Events: appended, Refusals: []Refusal{refused}}, outcome: OutcomeAppended},
		{name: "appended, then timed out", rc: Receipt{Events: appended, Limits: []string{"timeout"}}, timedOut: true, outcome: OutcomeAppended},
		{name: "refused, nothing appended", rc: Receipt{Refusals: []Refusal{refused, hidden}}, outcome: OutcomeNothing, lastErr: refused.String()},
		{name: "a hidden name only", rc: Receipt{Refusals: []Refusal{hidden}}, outcome: OutcomeNothing,
			lastErr: "the command exited without appending an accepted event to events.jsonl"},
		{name: "exit status", rc: Receipt{Exit: 3}, outcome: OutcomeNothing, lastErr: "the command exited with status 3 without appending an accepted event"},
		{name: "timeout", rc: Receipt{Exit: 143, Limits: []string{"timeout"}}, timedOut: true, outcome: OutcomeTimeout,
			lastErr: "the turn ran past its timeout (1m0s) and was stopped"},
		{name: "a limit", rc: Receipt{Exit: 6, Limits: []string{"pids"}}, outcome: OutcomeNothing, lastErr: "the command ran into its pids limit"},
		{name: "stopped", rc: Receipt{Exit: 143}, stopped: true, outcome: OutcomeInterrupted,
			lastErr: "the command exited with status 143 without appending an accepted event"},
		{name: "could not run", rc: Receipt{Exit: -1}, runErr: errors.New("no sandbox"), outcome: OutcomeFailed, lastErr: "the turn could not run: no sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := tt.rc
			rc.ID = tt.name
			setOutcome(&rc, tt.runErr, tt.timedOut, tt.stopped)
			rc.LastError = lastErrorOf(&rc, time.Minute, tt.runErr)
			assert.Equal(t, tt.outcome, rc.Outcome)
			assert.Equal(t, tt.lastErr, rc.LastError)
			requireAgrees(t, &rc)
		})
	}
}

// TestCloseInterruptedAgrees: a receipt a killed driver left running is
// closed with fields that agree, from its turn record or as interrupted.
func TestCloseInterruptedAgrees(t *testing.T) {
	d := &driver{cfg: &Config{Participants: []Participant{{ID: "bob", Timeout: time.Minute}}}, out: newProgress(io.Discard, ModePlain)}
	tests := []struct {
		name             string
		rc               Receipt
		outcome, lastErr string
	}{
		{"never appended", Receipt{State: StateRunning}, OutcomeInterrupted, "the previous attempt was interrupted: the driver stopped during it"},
		{"appended before the kill", Receipt{State: StateRunning, Events: []EventRef{{Seq: 4, Type: "blocked"}}}, OutcomeAppended, ""},
		{"recorded as appended", Receipt{State: StateDone, Outcome: OutcomeAppended, Events: []EventRef{{Seq: 2, Type: "proposal_submitted"}}}, OutcomeAppended, ""},
		{"recorded as timed out", Receipt{State: StateDone, Outcome: OutcomeTimeout, Exit: 143, Limits: []string{"timeout"}}, OutcomeTimeout,
			"the turn ran past its timeout (1m0s) and was stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := tt.rc
			rc.ID, rc.Participant = tt.name, "bob"
			d.closeInterrupted(&rc)
			assert.Equal(t, StateDone, rc.State)
			assert.Equal(t, tt.outcome, rc.Outcome)
			assert.Equal(t, tt.lastErr, rc.LastError)
			requireAgrees(t, &rc)
		})
	}
}
