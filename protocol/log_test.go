package protocol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/pycompat"
)

func TestCatchUpIncremental(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	other, err := OpenLog(k.dir)
	require.NoError(t, err)
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	k.must(ev{from: "server", event: EvProposalSubmitted})

	// other has not seen the appends until it refreshes.
	assert.Equal(t, 1, other.Snapshot().LastSeq)
	require.NoError(t, other.Refresh())
	assert.Equal(t, k.log.Snapshot(), other.Snapshot())
	off := other.offset

	// An append through other continues from the caught-up state.
	k.writeReview(4, "reader")
	rt := 3
	_, err = other.Append(EventSpec{Participant: "reader", Event: EvReviewSubmitted, Summary: "review", Doc: ReviewFile, ReplyTo: &rt})
	require.NoError(t, err)
	assert.Greater(t, other.offset, off)
	require.NoError(t, k.log.Refresh())
	assert.Equal(t, PhaseRevising, k.log.Snapshot().Phase)
	assert.Equal(t, other.Snapshot(), k.log.Snapshot())
}

func TestReplayWhenFileShrinksOrIsReplaced(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	k.must(ev{from: "server", event: EvProposalSubmitted})
	events, _ := k.files()
	lines := strings.SplitAfter(events, "\n")

	// Truncated back to two events: the state follows.
	k.write(EventsFile, lines[0]+lines[1])
	require.NoError(t, k.log.Refresh())
	assert.Equal(t, 2, k.log.Snapshot().LastSeq)
	assert.Equal(t, PhaseDrafting, k.log.Snapshot().Phase)

	// Same size, different bytes before the offset: detected through the
	// missing newline at the old end, then replayed.
	k.write(EventsFile, lines[0]+strings.TrimSuffix(lines[1], "\n")+" \n")
	require.NoError(t, k.log.Refresh())
	assert.Equal(t, 2, k.log.Snapshot().LastSeq)

	// Replaced by rename (new inode).
	tmp := filepath.Join(k.dir, "events.new")
	require.NoError(t, os.WriteFile(tmp, []byte(lines[0]), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(k.dir, EventsFile)))
	require.NoError(t, k.log.Refresh())
	assert.Equal(t, 1, k.log.Snapshot().LastSeq)
}

func TestRefreshIsCheapWhenUnchanged(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	off := k.log.offset
	for i := 0; i < 3; i++ {
		require.NoError(t, k.log.Refresh())
	}
	assert.Equal(t, off, k.log.offset)
}

func TestPartialLineRefusesAppends(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	f, err := os.OpenFile(filepath.Join(k.dir, EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"seq":2,"from":"server"`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before, proto := k.files()
	_, err = k.add(ev{from: "server", event: EvBlocked})
	require.Error(t, err)
	assert.Equal(t, Unavailable, KindOf(err))
	assert.Equal(t, "partial-line", err.(*Error).Rule)
	after, proto2 := k.files()
	assert.Equal(t, before, after)
	assert.Equal(t, proto, proto2)
}

func TestBrokenHistoryRefusesAppends(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	events, _ := k.files()
	k.write(EventsFile, events+`{"seq":5,"from":"server","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"x","reply_to":1}`+"\n")
	l, err := OpenLog(k.dir)
	require.NoError(t, err, "an invalid history is not fatal")
	assert.Equal(t, PhaseBlocked, l.Snapshot().Phase, "state is derived as far as possible")
	_, err = l.Append(EventSpec{Participant: "server", Event: EvBlocked, Summary: "again", ReplyTo: intp(1)})
	require.Error(t, err)
	assert.Equal(t, Unavailable, KindOf(err))
	assert.Equal(t, "history", err.(*Error).Rule)
	assert.Contains(t, err.Error(), "line 2")
}

func TestMissingProtocol(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenLog(dir)
	require.Error(t, err)
	assert.Equal(t, Unavailable, KindOf(err))
	assert.Equal(t, "protocol-json", err.(*Error).Rule)

	require.NoError(t, os.WriteFile(filepath.Join(dir, ProtocolFile), []byte("{nope"), 0o644))
	_, err = OpenLog(dir)
	require.Error(t, err)
	assert.Equal(t, "protocol-json", err.(*Error).Rule)

	// Removed under a live log: appends fail without creating files.
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	require.NoError(t, os.Remove(filepath.Join(k.dir, ProtocolFile)))
	_, err = k.log.Append(EventSpec{Participant: "server", Event: EvBlocked, Summary: "stop", ReplyTo: intp(1)})
	require.Error(t, err)
	assert.Equal(t, Unavailable, KindOf(err))
}

func TestProtocolJSONRewrite(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec", "server", "reader", "critic"))
	// Keys the protocol does not know survive a rewrite.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &raw))
	raw["x-note"] = "<kept & \"quoted\"> é"
	data, err := pycompat.MarshalIndent(raw)
	require.NoError(t, err)
	k.write(ProtocolFile, string(data))

	k.must(ev{from: "server", event: EvDeliverableDrafted})
	k.must(ev{from: "server", event: EvProposalSubmitted})
	text := k.read(ProtocolFile)
	assert.Contains(t, text, `"x-note": "<kept & \"quoted\"> é"`)
	assert.Contains(t, text, "  \"currentPhase\": \"reviewing\",\n")
	assert.Contains(t, text, "  \"waitingFor\": [\n    \"critic\",\n    \"reader\"\n  ],\n")
	assert.True(t, strings.HasSuffix(text, "}\n"))
	assert.Contains(t, text, `"coAuthors": [],`)
	entries, err := os.ReadDir(k.dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.Contains(e.Name(), ".tmp-"), "temporary file left: %s", e.Name())
	}
}

func TestEncodeLineEscapesSeparators(t *testing.T) {
	assert.Equal(t, `{"seq":1,"from":"a","event":"blocked","at":"t","summary":"x\u2028y<>"}`,
		string(encodeLine(Event{Seq: 1, From: "a", Event: "blocked", At: "t", Summary: "x\u2028y<>"})))
}

func TestCheckProtocolWrite(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	k.must(ev{from: "server", event: EvProposalSubmitted})
	current := k.read(ProtocolFile)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(current), &raw))
	edit := func(f func(m map[string]any)) []byte {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(current), &m))
		f(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	assert.NoError(t, k.log.CheckProtocolWrite([]byte(current)))
	assert.NoError(t, k.log.CheckProtocolWrite(edit(func(m map[string]any) { m["updatedAt"] = "2030-01-01T00:00:00Z" })))
	assert.NoError(t, k.log.CheckProtocolWrite(edit(func(m map[string]any) { m["schemaVersion"] = 2.0 })))
	refused := map[string][]byte{
		"forged phase":   edit(func(m map[string]any) { m["currentPhase"] = "completed" }),
		"forged waiting": edit(func(m map[string]any) { m["waitingFor"] = []string{"server"} }),
		"forged owner":   edit(func(m map[string]any) { m["proposalOwner"] = "reader" }),
		"added reviewer": edit(func(m map[string]any) { m["participants"] = []any{map[string]any{"id": "server"}} }),
		"dropped field":  edit(func(m map[string]any) { delete(m, "objective") }),
		"added field":    edit(func(m map[string]any) { m["extra"] = 1 }),
		"not json":       []byte("{"),
		"not an object":  []byte("[]"),
	}
	for name, content := range refused {
		err := k.log.CheckProtocolWrite(content)
		require.Error(t, err, name)
		assert.Equal(t, Rejected, KindOf(err), name)
		assert.Equal(t, "protocol-json", err.(*Error).Rule, name)
	}
}

func TestAppendTimeNeverGoesBack(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	// The clock is behind the last event (skew between machines).
	k.log.now = func() time.Time { return kitEpoch.Add(-time.Hour) }
	got := k.must(ev{from: "server", event: EvDeliverableDrafted})
	assert.Equal(t, "2026-01-02T03:04:05Z", got.At)
	assert.Equal(t, "2026-01-02T03:04:06Z", eventTime(kitEpoch, kitEpoch.Add(500*time.Millisecond), true))
	assert.Equal(t, "2026-01-02T03:04:05Z", eventTime(kitEpoch.Add(900*time.Millisecond), kitEpoch, true))
}

func TestSnapshotFrozenExternalInsideFolder(t *testing.T) {
	root := t.TempDir()
	o := kitOptions(filepath.Join(root, "collab"), "test-plan")
	o.Mode, o.RepoRoot, o.Dir = "external", ".", "out"
	k := newKit(t, o)
	k.runUntil(func(s Snapshot) bool { return s.Phase == PhaseReadinessCheck && len(s.Frozen) == 1 })
	assert.Equal(t, map[string]string{"out/test-plan.md": mustSHA(t, filepath.Join(k.dir, "out", "test-plan.md"))}, k.log.Snapshot().Frozen)
}

func TestClosedLog(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	require.NoError(t, k.log.Close())
	_, err := k.log.Append(EventSpec{Participant: "server", Event: EvBlocked, Summary: "stop", ReplyTo: intp(1)})
	require.Error(t, err)
	assert.Equal(t, Unavailable, KindOf(err))
	assert.Error(t, k.log.Refresh())
	assert.Equal(t, k.dir, k.log.Folder())
}

func intp(n int) *int { return &n }

func mustSHA(t *testing.T, path string) string {
	sum, err := digest.File(path)
	require.NoError(t, err)
	return sum
}
