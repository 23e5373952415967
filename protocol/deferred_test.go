package protocol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// deferByHand switches l to deferred writes without the background
// writer, so that a test decides when the file is written.
func deferByHand(l *Log) {
	l.mu.Lock()
	l.pw.on = true
	l.mu.Unlock()
}

func phaseOf(t *testing.T, data []byte) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	s, _ := m["currentPhase"].(string)
	return s
}

func TestDeferredProtocolWrites(t *testing.T) {
	tests := []struct {
		name string
		// between runs after the deferred appends and before the log
		// writes what it has pending.
		between func(t *testing.T, k *kit)
		// objective is the objective the file must end with.
		objective string
	}{
		{name: "nobody else writes", objective: "Decide how the service stores sessions"},
		{name: "another process appends and rewrites the file meanwhile", objective: "Decide how the service stores sessions",
			between: func(t *testing.T, k *kit) {
				o, err := OpenLog(k.dir)
				require.NoError(t, err)
				defer o.Close()
				k.writeReview(4, "reader")
				rt := 3
				_, err = o.Append(EventSpec{Participant: "reader", Event: EvReviewSubmitted, Summary: "review", Doc: ReviewFile, ReplyTo: &rt})
				require.NoError(t, err)
			}},
		{name: "a person edits the static declaration meanwhile", objective: "A new objective",
			between: func(t *testing.T, k *kit) {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
				m["objective"] = "A new objective"
				b, err := pycompat.MarshalIndent(m)
				require.NoError(t, err)
				k.write(ProtocolFile, string(b))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
			deferByHand(k.log)
			before := k.read(ProtocolFile)
			k.must(ev{from: "server", event: EvDeliverableDrafted})
			k.must(ev{from: "server", event: EvProposalSubmitted})

			// The views' content moved; the file did not.
			served, err := k.log.ProtocolJSON()
			require.NoError(t, err)
			assert.Equal(t, PhaseReviewing, phaseOf(t, served))
			assert.Equal(t, before, k.read(ProtocolFile), "the rewrite is deferred")

			if tt.between != nil {
				tt.between(t, k)
			}
			require.NoError(t, k.log.Close())

			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
			assert.Equal(t, tt.objective, m["objective"], "no change of the declaration is lost")
			res := Validate(k.dir)
			assert.Equal(t, 0, res.ExitCode(), "%v", res.Errors)
			entries, err := os.ReadDir(k.dir)
			require.NoError(t, err)
			for _, e := range entries {
				assert.NotContains(t, e.Name(), ".tmp-", "temporary file left behind")
			}
		})
	}
}

func TestDeferredWriterWritesInTheBackground(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.log.DeferProtocolWrites()
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	k.must(ev{from: "server", event: EvProposalSubmitted})
	require.NoError(t, k.log.SyncProtocol())
	served, err := k.log.ProtocolJSON()
	require.NoError(t, err)
	assert.Equal(t, string(served), k.read(ProtocolFile))
	require.NoError(t, k.log.Close())
	assert.Equal(t, PhaseReviewing, phaseOf(t, []byte(k.read(ProtocolFile))))
	// After Close, appends are synchronous again.
	assert.False(t, k.log.pw.on)
}

// A log that catches up with events whose protocol.json rewrite has not
// reached the disk (another process's deferred write, or a crash) serves
// the derived state without writing the file; Reconcile writes it.
func TestProtocolJSONWhileTheFileIsBehind(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	stale := k.read(ProtocolFile)
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	k.must(ev{from: "server", event: EvProposalSubmitted})
	k.write(ProtocolFile, stale) // the rewrite never happened

	l, err := OpenLog(k.dir)
	require.NoError(t, err)
	defer l.Close()
	served, err := l.ProtocolJSON()
	require.NoError(t, err)
	assert.Equal(t, PhaseReviewing, phaseOf(t, served))
	again, err := l.ProtocolJSON()
	require.NoError(t, err)
	assert.Equal(t, served, again, "the same bytes for the same history")
	assert.Equal(t, stale, k.read(ProtocolFile), "serving writes nothing")
	require.NoError(t, l.CheckProtocolWrite(served), "the served content is what a rewrite must say")

	changed, err := l.Reconcile()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, PhaseReviewing, phaseOf(t, []byte(k.read(ProtocolFile))))
	assert.Equal(t, 0, Validate(k.dir).ExitCode())
}
