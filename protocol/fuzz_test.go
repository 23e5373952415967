package protocol

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	fuzzOnce     sync.Once
	fuzzTemplate string
	fuzzErr      error
)

// fuzzFolder returns a copy of a folder in phase decision_review, right
// after question_classified (seq 6), where most events are plausible.
func fuzzFolder(t *testing.T) string {
	fuzzOnce.Do(func() {
		dir, err := os.MkdirTemp("", "acpfs-fuzz-template-")
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzTemplate = filepath.Join(dir, "c")
		k := newKit(t, kitOptions(fuzzTemplate, "design-spec"))
		for _, s := range k.happySteps()[:5] {
			s()
		}
	})
	require.NoError(t, fuzzErr)
	dst := filepath.Join(t.TempDir(), "c")
	err := filepath.WalkDir(fuzzTemplate, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fuzzTemplate, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	require.NoError(t, err)
	return dst
}

func FuzzAppendLine(f *testing.F) {
	for _, s := range []string{
		`{"seq":7,"from":"reader","event":"decision_accepted","at":"2026-01-02T03:05:00Z","summary":"ok","doc":"decisions.md","reply_to":6}`,
		`{"seq":7,"from":"server","event":"decision_proposed","at":"2026-01-02T03:05:00Z","summary":"again","reply_to":6}`,
		`{"seq":7,"from":"server","event":"deliverable_revised","at":"2026-01-02T03:05:00Z","summary":"r","doc":"deliverables/design-spec.md","reply_to":6,"role":"primary"}`,
		`{"seq":7,"from":"server","event":"deliverable_frozen","at":"2026-01-02T03:05:00Z","summary":"f","doc":"deliverables/design-spec.md","reply_to":6,"role":"primary","sha256":"0000000000000000000000000000000000000000000000000000000000000000"}`,
		`{"seq":7,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00+01:00","summary":"stop","reply_to":6}`,
		`{"seq":7,"from":"server","event":"completed","at":"2026-01-02T03:05:00Z","summary":"done","doc":"conclusion.md","reply_to":6}`,
		`{"seq":8,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"gap","reply_to":6}`,
		`{"seq":7,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"\u2028","reply_to":6,"reply_to":6}`,
		`{"seq":7.0,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"x","reply_to":6}`,
		`{"seq":7,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":{"nested":[1,"]}"]},"reply_to":6}`,
		"{\"seq\":7,\"from\":\"reader\",\"event\":\"blocked\",\"at\":\"2026-01-02T03:05:00Z\",\"summary\":\"a\u2029b\",\"reply_to\":6}",
		`{"seq":7,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"“stuck” — 20°C…","reply_to":6}`,
		"{\"seq\":7,\"from\":\"reader\",\"event\":\"blocked\",\"at\":\"2026-01-02T03:05:00Z\",\"summary\":\"a\u0085b\",\"reply_to\":6}",
		`[]`, `{}`, `null`, ``, `{"seq":`, "\xff\xfe", `{"seq":7}{"seq":8}`,
		"{\"seq\":7,\"from\":\"reader\",\"event\":\"blocked\",\"at\":\"2026-01-02T03:05:00Z\",\"summary\":\"crlf\",\"reply_to\":6}\r",
		`{"seq":7,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"x","reply_to":6,"x-tool":{"a":[1]}}`,
		"{\"seq\":7,\n\"from\":\"reader\",\"event\":\"blocked\",\"at\":\"2026-01-02T03:05:00Z\",\"summary\":\"x\",\"reply_to\":6}",
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"seq":7,"from":"reader","event":"decision_accepted","at":"2026-01-02T03:05:00Z","summary":"ok","reply_to":6}`), "server")
	f.Fuzz(func(t *testing.T, line []byte, participant string) {
		rec := parseLine(line, 7)
		if rec.object && len(rec.bad) == 0 {
			// A line without parse problems round-trips through encodeLine.
			again := parseLine(encodeLine(rec.Event), 7)
			assert.Empty(t, again.bad)
			assert.Equal(t, rec.Event, again.Event)
		}
		if len(line) > 4096 || strings.ContainsRune(participant, 0) {
			return
		}
		dir := fuzzFolder(t)
		l, err := OpenLog(dir)
		require.NoError(t, err)
		evBefore, err := os.ReadFile(filepath.Join(dir, EventsFile))
		require.NoError(t, err)
		protoBefore, err := os.ReadFile(filepath.Join(dir, ProtocolFile))
		require.NoError(t, err)
		before := l.Snapshot()
		got, err := l.AppendLine(line, participant)
		evAfter, _ := os.ReadFile(filepath.Join(dir, EventsFile))
		protoAfter, _ := os.ReadFile(filepath.Join(dir, ProtocolFile))
		if err != nil {
			kind := KindOf(err)
			assert.Contains(t, []ErrorKind{Malformed, Rejected, Unavailable}, kind)
			assert.NotContains(t, err.Error(), "\n")
			assert.Equal(t, evBefore, evAfter, "refused line changed events.jsonl")
			assert.Equal(t, protoBefore, protoAfter, "refused line changed protocol.json")
			assert.Equal(t, before, l.Snapshot())
			return
		}
		assert.Equal(t, append(append(evBefore, line...), '\n'), evAfter)
		assert.Equal(t, before.LastSeq+1, got.Seq)
		fresh, err := OpenLog(dir)
		require.NoError(t, err)
		assert.Nil(t, fresh.historyBad, "an accepted line must replay cleanly")
		assert.Equal(t, l.Snapshot(), fresh.Snapshot())
	})
}
