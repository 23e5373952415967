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

// The state cache holds core as JSON: a field of core that JSON does
// not carry would be lost by every CLI process that starts from a cache.
func TestStateCacheCoversCore(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeOf(core{}), reflect.TypeOf(lastEvent{})} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			assert.True(t, f.IsExported(), "%s.%s is not exported: JSON leaves it out", typ.Name(), f.Name)
			assert.NotEmpty(t, f.Tag.Get("json"), "%s.%s has no JSON name", typ.Name(), f.Name)
		}
	}

	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.runUntil(func(s Snapshot) bool { return s.Phase == PhaseReadinessCheck })
	orig := k.log.state
	b, err := json.Marshal(orig)
	require.NoError(t, err)
	var restored core
	require.NoError(t, json.Unmarshal(b, &restored))
	b2, err := json.Marshal(restored)
	require.NoError(t, err)
	assert.JSONEq(t, string(b), string(b2))
	assert.True(t, restored.LastAt.Equal(orig.LastAt))
}

// forgeState rewrites the state cache at path with a phase no history
// gives, so that a test can tell whether a log started from it.
func forgeState(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cp stateCacheFile
	require.NoError(t, json.Unmarshal(b, &cp))
	cp.State.Phase = "forged"
	b, err = json.Marshal(&cp)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

func TestStateCacheIsUsedOnlyWhileItDescribesTheFolder(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, k *kit, cache string)
		used   bool
	}{
		{name: "nothing changed", used: true},
		{name: "protocol.json rewritten by an append elsewhere (same declaration)", used: true,
			change: func(t *testing.T, k *kit, cache string) {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
				m["updatedAt"] = "2030-01-01T00:00:00Z"
				b, err := pycompat.MarshalIndent(m)
				require.NoError(t, err)
				k.write(ProtocolFile, string(b))
			}},
		{name: "events.jsonl replaced by a copy (another inode)", change: func(t *testing.T, k *kit, cache string) {
			events, _ := k.files()
			tmp := filepath.Join(k.dir, "events.copy")
			require.NoError(t, os.WriteFile(tmp, []byte(events), 0o644))
			require.NoError(t, os.Rename(tmp, filepath.Join(k.dir, EventsFile)))
		}},
		{name: "last line edited in place, same length", change: func(t *testing.T, k *kit, cache string) {
			events, _ := k.files()
			i := strings.LastIndex(events, `"summary":"`)
			require.Positive(t, i)
			b := []byte(events)
			b[i+len(`"summary":"`)] ^= 0x20 // flip the case of the summary's first letter
			k.write(EventsFile, string(b))
		}},
		{name: "events.jsonl cut below the cached offset", change: func(t *testing.T, k *kit, cache string) {
			events, _ := k.files()
			lines := strings.SplitAfter(events, "\n")
			k.write(EventsFile, strings.Join(lines[:2], ""))
		}},
		{name: "static declaration changed", change: func(t *testing.T, k *kit, cache string) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
			m["objective"] = "Another objective"
			b, err := pycompat.MarshalIndent(m)
			require.NoError(t, err)
			k.write(ProtocolFile, string(b))
		}},
		{name: "state cache others may write", change: func(t *testing.T, k *kit, cache string) {
			require.NoError(t, os.Chmod(cache, 0o666))
		}},
		{name: "state cache of another folder", change: func(t *testing.T, k *kit, cache string) {
			b, err := os.ReadFile(cache)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(cache, []byte(strings.Replace(string(b), k.dir, k.dir+"-other", 1)), 0o600))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
			k.must(ev{from: "server", event: EvDeliverableDrafted})
			k.must(ev{from: "server", event: EvProposalSubmitted})
			cache := filepath.Join(t.TempDir(), "cache", "c.json")
			require.NoError(t, k.log.StartStateCache(cache)())
			forgeState(t, cache)
			if tt.change != nil {
				tt.change(t, k, cache)
			}
			l, err := OpenLogCached(k.dir, cache)
			require.NoError(t, err)
			defer l.Close()
			if tt.used {
				assert.Equal(t, "forged", l.Snapshot().Phase, "the state cache was not used")
				return
			}
			assert.NotEqual(t, "forged", l.Snapshot().Phase, "a state cache that does not describe the folder was used")
			fresh, err := OpenLog(k.dir)
			require.NoError(t, err)
			defer fresh.Close()
			assert.Equal(t, fresh.Snapshot(), l.Snapshot())
		})
	}
}

// A log started from a state cache catches up with what was appended
// since, and appends exactly as one that replayed everything.
func TestStateCacheCatchesUp(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	cache := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, k.log.StartStateCache(cache)())
	k.must(ev{from: "server", event: EvProposalSubmitted}) // after the state was cached

	l, err := OpenLogCached(k.dir, cache)
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
	require.NoError(t, l.StartStateCache(cache)())
	assert.Equal(t, 0, Validate(k.dir).ExitCode())
	again, err := OpenLogCached(k.dir, cache)
	require.NoError(t, err)
	defer again.Close()
	assert.Equal(t, PhaseRevising, again.Snapshot().Phase)
	assert.Equal(t, 4, again.Snapshot().LastSeq)
}

// ACPFS_STATE_CACHE_DIR places the state caches; the deprecated
// ACPFS_CHECKPOINT_DIR still does when it is not set.
func TestDefaultStateCachePathFollowsTheEnvironment(t *testing.T) {
	tests := []struct {
		name, dir, old, want string
	}{
		{name: "new variable", dir: "/tmp/new", want: "/tmp/new"},
		{name: "deprecated variable", old: "/tmp/old", want: "/tmp/old"},
		{name: "both: the new one wins", dir: "/tmp/new", old: "/tmp/old", want: "/tmp/new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(StateCacheDirEnv, tt.dir)
			t.Setenv("ACPFS_CHECKPOINT_DIR", tt.old)
			p := DefaultStateCachePath("/some/folder")
			assert.Equal(t, tt.want, filepath.Dir(p))
			assert.Equal(t, ".json", filepath.Ext(p))
		})
	}
	t.Setenv(StateCacheDirEnv, "")
	t.Setenv("ACPFS_CHECKPOINT_DIR", "")
	t.Setenv("XDG_CACHE_HOME", "/tmp/cache")
	assert.Equal(t, filepath.Join("/tmp/cache", "acpfs", "state-cache"), filepath.Dir(DefaultStateCachePath("/some/folder")))
}

// A state cache started before an append (as acpfs append saves it while
// it appends) describes the folder after that append too: the next log
// starts from it and applies the appended line.
func TestStateCacheStartedBeforeAnAppend(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})
	ckpt := filepath.Join(t.TempDir(), "ckpt", "c.json")
	wait := k.log.StartStateCache(ckpt)
	rt := 2
	_, err := k.log.Append(EventSpec{Participant: "server", Event: EvProposalSubmitted, Summary: "proposal", Doc: ProposalFile, ReplyTo: &rt})
	require.NoError(t, err)
	require.NoError(t, wait())

	probe := &Log{folder: k.dir}
	require.NoError(t, probe.loadProtocolLocked())
	require.True(t, probe.restoreStateCacheLocked(ckpt), "the state cache does not fit the folder")
	assert.Equal(t, 2, probe.lines, "the state cache is of the state before the append")

	l, err := OpenLogCached(k.dir, ckpt)
	require.NoError(t, err)
	defer l.Close()
	fresh, err := OpenLog(k.dir)
	require.NoError(t, err)
	defer fresh.Close()
	assert.Equal(t, fresh.Snapshot(), l.Snapshot())
	assert.Equal(t, 3, l.Snapshot().LastSeq)

	wait = fresh.StartStateCache("")
	assert.NoError(t, wait(), "no path: nothing to write")
}
