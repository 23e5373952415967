package protocol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// The checkpoint mirrors core field by field: a field added to core and
// forgotten here would be lost by every CLI process that starts from a
// checkpoint.
func TestCheckpointCoversCore(t *testing.T) {
	assert.Equal(t, reflect.TypeOf(core{}).NumField(), reflect.TypeOf(checkpointCore{}).NumField(), "core and checkpointCore differ")
	assert.Equal(t, reflect.TypeOf(lastEvent{}).NumField(), reflect.TypeOf(checkpointEvent{}).NumField(), "lastEvent and checkpointEvent differ")

	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.runUntil(func(s Snapshot) bool { return s.Phase == PhaseReadinessCheck })
	orig := coreOut(&k.log.state)
	b, err := json.Marshal(orig)
	require.NoError(t, err)
	var back checkpointCore
	require.NoError(t, json.Unmarshal(b, &back))
	restored := coreIn(&back)
	b2, err := json.Marshal(coreOut(&restored))
	require.NoError(t, err)
	assert.JSONEq(t, string(b), string(b2))
	assert.True(t, restored.lastAt.Equal(k.log.state.lastAt))
}

// forgeState rewrites the checkpoint at path with a phase no history
// gives, so that a test can tell whether a log started from it.
func forgeState(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cp checkpointFile
	require.NoError(t, json.Unmarshal(b, &cp))
	cp.State.Phase = "forged"
	b, err = json.Marshal(&cp)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

func TestCheckpointIsUsedOnlyWhileItDescribesTheFolder(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, k *kit, ckpt string)
		used   bool
	}{
		{name: "nothing changed", used: true},
		{name: "protocol.json rewritten by an append elsewhere (same declaration)", used: true,
			change: func(t *testing.T, k *kit, ckpt string) {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
				m["updatedAt"] = "2030-01-01T00:00:00Z"
				b, err := pycompat.MarshalIndent(m)
				require.NoError(t, err)
				k.write(ProtocolFile, string(b))
			}},
		{name: "events.jsonl replaced by a copy (another inode)", change: func(t *testing.T, k *kit, ckpt string) {
			events, _ := k.files()
			tmp := filepath.Join(k.dir, "events.copy")
			require.NoError(t, os.WriteFile(tmp, []byte(events), 0o644))
			require.NoError(t, os.Rename(tmp, filepath.Join(k.dir, EventsFile)))
		}},
		{name: "last line edited in place, same length", change: func(t *testing.T, k *kit, ckpt string) {
			events, _ := k.files()
			i := strings.LastIndex(events, `"summary":"`)
			require.Positive(t, i)
			b := []byte(events)
			b[i+len(`"summary":"`)] ^= 0x20 // flip the case of the summary's first letter
			k.write(EventsFile, string(b))
		}},
		{name: "events.jsonl cut below the checkpoint", change: func(t *testing.T, k *kit, ckpt string) {
			events, _ := k.files()
			lines := strings.SplitAfter(events, "\n")
			k.write(EventsFile, strings.Join(lines[:2], ""))
		}},
		{name: "static declaration changed", change: func(t *testing.T, k *kit, ckpt string) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
			m["objective"] = "Another objective"
			b, err := pycompat.MarshalIndent(m)
			require.NoError(t, err)
			k.write(ProtocolFile, string(b))
		}},
		{name: "checkpoint others may write", change: func(t *testing.T, k *kit, ckpt string) {
			require.NoError(t, os.Chmod(ckpt, 0o666))
		}},
		{name: "checkpoint of another folder", change: func(t *testing.T, k *kit, ckpt string) {
			b, err := os.ReadFile(ckpt)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(ckpt, []byte(strings.Replace(string(b), k.dir, k.dir+"-other", 1)), 0o600))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
			k.must(ev{from: "server", event: EvDeliverableDrafted})
			k.must(ev{from: "server", event: EvProposalSubmitted})
			ckpt := filepath.Join(t.TempDir(), "ckpt", "c.json")
			require.NoError(t, k.log.SaveCheckpoint(ckpt))
			forgeState(t, ckpt)
			if tt.change != nil {
				tt.change(t, k, ckpt)
			}
			l, err := OpenLogFrom(k.dir, ckpt)
			require.NoError(t, err)
			defer l.Close()
			if tt.used {
				assert.Equal(t, "forged", l.Snapshot().Phase, "the checkpoint was not used")
				return
			}
			assert.NotEqual(t, "forged", l.Snapshot().Phase, "a checkpoint that does not describe the folder was used")
			fresh, err := OpenLog(k.dir)
			require.NoError(t, err)
			defer fresh.Close()
			assert.Equal(t, fresh.Snapshot(), l.Snapshot())
		})
	}
}

// A log started from a checkpoint catches up with what was appended
// since, and appends exactly as one that replayed everything.
func TestCheckpointCatchesUp(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	ckpt := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, k.log.SaveCheckpoint(ckpt))
	k.must(ev{from: "server", event: EvProposalSubmitted}) // after the checkpoint

	l, err := OpenLogFrom(k.dir, ckpt)
	require.NoError(t, err)
	defer l.Close()
	fresh, err := OpenLog(k.dir)
	require.NoError(t, err)
	defer fresh.Close()
	assert.Equal(t, fresh.Snapshot(), l.Snapshot())
	assert.Equal(t, PhaseReviewing, l.Snapshot().Phase)

	k.writeReview(4, "reader")
	rt := 3
	_, err = l.Append(EventSpec{Participant: "reader", Event: EvReviewSubmitted, Summary: "review", Doc: ReviewFile, ReplyTo: &rt})
	require.NoError(t, err)
	require.NoError(t, l.SaveCheckpoint(ckpt))
	assert.Equal(t, 0, Validate(k.dir).ExitCode())
	again, err := OpenLogFrom(k.dir, ckpt)
	require.NoError(t, err)
	defer again.Close()
	assert.Equal(t, PhaseRevising, again.Snapshot().Phase)
	assert.Equal(t, 4, again.Snapshot().LastSeq)
}

// A checkpoint started before an append (as acpfs append saves it while
// it appends) describes the folder after that append too: the next log
// starts from it and applies the appended line.
func TestCheckpointStartedBeforeAnAppend(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	ckpt := filepath.Join(t.TempDir(), "ckpt", "c.json")
	wait := k.log.StartCheckpoint(ckpt)
	rt := 2
	_, err := k.log.Append(EventSpec{Participant: "server", Event: EvProposalSubmitted, Summary: "proposal", Doc: ProposalFile, ReplyTo: &rt})
	require.NoError(t, err)
	require.NoError(t, wait())

	probe := &Log{folder: k.dir}
	require.NoError(t, probe.loadProtocolLocked())
	require.True(t, probe.restoreLocked(ckpt), "the checkpoint does not fit the folder")
	assert.Equal(t, 2, probe.lines, "the checkpoint is of the state before the append")

	l, err := OpenLogFrom(k.dir, ckpt)
	require.NoError(t, err)
	defer l.Close()
	fresh, err := OpenLog(k.dir)
	require.NoError(t, err)
	defer fresh.Close()
	assert.Equal(t, fresh.Snapshot(), l.Snapshot())
	assert.Equal(t, 3, l.Snapshot().LastSeq)

	wait = fresh.StartCheckpoint("")
	assert.NoError(t, wait(), "no path: nothing to write")
}
