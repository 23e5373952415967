package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/protocol"
)

// server starts an embedded JetStream server for one test.
func server(t *testing.T) string {
	t.Helper()
	s, err := natsrv.Start(natsrv.Config{Name: "t", Dir: t.TempDir(), Port: -1})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

func open(t *testing.T, url, host string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{URL: url, Collab: "c1", Host: host})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// hostFolders initializes a collaboration in a and gives b a copy of
// everything but the history, as the documents' sync would.
func hostFolders(t *testing.T) (a, b string) {
	t.Helper()
	a, b = filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	_, err := protocol.Init(protocol.InitOptions{Folder: a, Participants: []string{"alice", "bob"},
		Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	require.NoError(t, os.CopyFS(b, os.DirFS(a)))
	require.NoError(t, os.Remove(filepath.Join(b, protocol.EventsFile)))
	return a, b
}

func openLog(t *testing.T, folder string, r protocol.Replica) *protocol.Log {
	t.Helper()
	l, err := protocol.OpenLog(folder)
	require.NoError(t, err)
	l.SetReplica(r)
	t.Cleanup(func() { l.Close() })
	return l
}

// twoHistories seeds a store from a's folder and gives b a copy of its
// history: two hosts of one collaboration, caught up.
func twoHistories(t *testing.T) (a, b string, la, lb *protocol.Log) {
	t.Helper()
	url := server(t)
	a, b = hostFolders(t)
	sa, sb := open(t, url, "ha"), open(t, url, "hb")
	require.NoError(t, sa.Events().Seed(a))
	la, lb = openLog(t, a, sa.Events()), openLog(t, b, sb.Events())
	_, err := lb.Pull()
	require.NoError(t, err)
	return a, b, la, lb
}

func draft(l *protocol.Log, from string) (protocol.Event, error) {
	one := 1
	return l.Append(protocol.EventSpec{Participant: from, Event: "deliverable_drafted", Summary: "draft",
		Doc: "deliverables/design-spec.md", ReplyTo: &one, Role: "primary"})
}

func TestEventsTwoHostsOneHistory(t *testing.T) {
	url := server(t)
	a, b := hostFolders(t)
	sa, sb := open(t, url, "ha"), open(t, url, "hb")
	require.NoError(t, sa.Events().Seed(a))
	require.NoError(t, sb.Events().Seed(b))
	la, lb := openLog(t, a, sa.Events()), openLog(t, b, sb.Events())
	n, err := lb.Pull()
	require.NoError(t, err)
	require.Equal(t, 1, n, "b copies the initialized event")

	// Both hosts append as fast as they can; every append lands once.
	const each = 40
	var wg sync.WaitGroup
	for _, l := range []*protocol.Log{la, lb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := draft(l, "alice")
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	_, err = la.Pull()
	require.NoError(t, err)
	_, err = lb.Pull()
	require.NoError(t, err)
	ea, err := os.ReadFile(filepath.Join(a, protocol.EventsFile))
	require.NoError(t, err)
	eb, err := os.ReadFile(filepath.Join(b, protocol.EventsFile))
	require.NoError(t, err)
	require.Equal(t, string(ea), string(eb))
	require.Equal(t, 1+2*each, la.Snapshot().LastSeq)
	require.Equal(t, 1+2*each, lb.Snapshot().LastSeq)
	require.Equal(t, protocol.Validate(a).Errors, protocol.Validate(b).Errors)
}

func TestEventsStaleLineRefused(t *testing.T) {
	_, _, la, lb := twoHistories(t)
	_, err := draft(la, "alice")
	require.NoError(t, err)
	// b has not caught up: its agent writes seq 2 too, which a took.
	line := []byte(`{"seq":2,"from":"alice","event":"deliverable_drafted","at":"2099-01-01T00:00:00Z","summary":"late","doc":"deliverables/design-spec.md","reply_to":1,"role":"primary"}`)
	_, err = lb.AppendLine(line, "alice")
	require.Error(t, err)
	require.Equal(t, protocol.Rejected, protocol.KindOf(err), "%v", err)
	require.Equal(t, 2, lb.Snapshot().LastSeq, "b caught up on the conflict")
}

func TestEventsSeedRefusesForeignHistory(t *testing.T) {
	url := server(t)
	a, _ := hostFolders(t)
	c, _ := hostFolders(t)
	require.NoError(t, open(t, url, "ha").Events().Seed(a))
	// Another collaboration's folder: its initialized line differs (time).
	ec := filepath.Join(c, protocol.EventsFile)
	require.NoError(t, os.WriteFile(ec, []byte(`{"seq":1,"from":"bob","event":"initialized","at":"2000-01-01T00:00:00Z","summary":"other"}`+"\n"), 0o644))
	err := open(t, url, "hc").Events().Seed(c)
	require.ErrorContains(t, err, "differs from the store's history")
}

func TestEventsLinesWrittenWithoutTheStoreAreCut(t *testing.T) {
	a, b, la, lb := twoHistories(t)

	// Two lines written to b's copy by someone who does not use the
	// store, then two others appended through the store on a: the line
	// counts agree again, the lines do not.
	forged := func(seq int) string {
		return fmt.Sprintf(`{"seq":%d,"from":"alice","event":"deliverable_drafted","at":"2026-01-01T00:00:00Z","summary":"forged","doc":"deliverables/design-spec.md","reply_to":1,"role":"primary"}`+"\n", seq)
	}
	f, err := os.OpenFile(filepath.Join(b, protocol.EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(forged(2) + forged(3))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	for range 2 {
		_, err = draft(la, "alice")
		require.NoError(t, err)
	}
	require.NoError(t, lb.Refresh())
	require.Equal(t, 1, lb.Snapshot().LastSeq, "b applies no line the store does not hold")

	_, err = draft(lb, "alice")
	require.NoError(t, err)
	_, err = la.Pull()
	require.NoError(t, err)
	ea, err := os.ReadFile(filepath.Join(a, protocol.EventsFile))
	require.NoError(t, err)
	eb, err := os.ReadFile(filepath.Join(b, protocol.EventsFile))
	require.NoError(t, err)
	require.Equal(t, string(ea), string(eb), "b's copy was cut back to the store's history")
	require.NotContains(t, string(eb), "forged")
	require.Equal(t, 4, lb.Snapshot().LastSeq)
}

func TestEventsSeedRefusesLinesPastTheStream(t *testing.T) {
	url := server(t)
	a, _ := hostFolders(t)
	sa := open(t, url, "ha")
	require.NoError(t, sa.Events().Seed(a))
	la := openLog(t, a, nil)
	_, err := draft(la, "alice") // no replica: the stream does not get it
	require.NoError(t, err)
	err = open(t, url, "hb").Events().Seed(a)
	require.ErrorContains(t, err, "does not hold")
}

func TestEventsIncompleteLineWrittenWithoutTheStoreIsCut(t *testing.T) {
	_, b, la, lb := twoHistories(t)
	f, err := os.OpenFile(filepath.Join(b, protocol.EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"seq":2,"from":"alice","event":"blo`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = draft(la, "alice")
	require.NoError(t, err)
	n, err := lb.Pull()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = draft(lb, "alice")
	require.NoError(t, err, "b appends again")
	eb, err := os.ReadFile(filepath.Join(b, protocol.EventsFile))
	require.NoError(t, err)
	require.NotContains(t, string(eb), `"blo`)
	require.Equal(t, 3, lb.Snapshot().LastSeq)
}
