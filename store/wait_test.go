package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/protocol"
)

// A host whose folder is empty waits for the first host's publication,
// learning of it from the store, and returns once both protocol.json and
// the history are there.
func TestWaitPublishedReturnsOnceTheFirstHostPublishes(t *testing.T) {
	url := server(t)
	b := open(t, url, "hb")
	var mu sync.Mutex
	var said []Missing
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.WaitPublished(context.Background(), Missing{Protocol: true, History: true}, time.Minute, time.Second,
			func(m Missing, _ time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if said = append(said, m); len(said) == 1 {
					close(waiting)
				}
			})
	}()
	<-waiting
	mu.Lock()
	assert.Equal(t, Missing{Protocol: true, History: true}, said[0])
	mu.Unlock()
	select {
	case err := <-done:
		t.Fatalf("returned before anything was published: %v", err)
	default:
	}

	// The first host starts: its documents, then its history.
	adir := filepath.Join(t.TempDir(), "a")
	_, err := protocol.Init(protocol.InitOptions{Folder: adir, Participants: []string{"alice", "bob"},
		Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	a := newDocHost(t, url, "ha", adir)
	require.NoError(t, a.s.Events().Seed(adir))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("still waiting after the first host published")
	}
}

// Nothing published: the wait ends at its bound (at once for 0) with an
// error that names what is missing.
func TestWaitPublishedFailsPastTheBound(t *testing.T) {
	url := server(t)
	b := open(t, url, "hb")
	for _, tc := range []struct {
		name  string
		need  Missing
		bound time.Duration
		want  string
	}{
		{"both, bounded", Missing{Protocol: true, History: true}, 300 * time.Millisecond, "no protocol.json and no history (events.jsonl) in the store after waiting 300ms"},
		{"history only, at once", Missing{History: true}, 0, "collaboration c1: no history (events.jsonl) in the store after waiting 0s"},
		{"protocol only", Missing{Protocol: true}, 200 * time.Millisecond, "no protocol.json in the store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := b.WaitPublished(context.Background(), tc.need, tc.bound, time.Second, nil)
			require.ErrorIs(t, err, ErrNotPublished)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "--store-wait")
		})
	}
}
