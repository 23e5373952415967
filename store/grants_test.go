package store

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

func testGrant(agent string) *grants.Grant {
	return &grants.Grant{GrantID: grants.GrantIDFor(agent), AgentID: agent, Role: "reviewer",
		Objective: "o", MayRead: []string{"**"}, CreatedAt: "2026-01-01T00:00:00Z"}
}

func TestGrantsFollowTheStore(t *testing.T) {
	url := server(t)
	coord, hb := open(t, url, "ha"), open(t, url, "hb")
	rd := grants.NewRunDir(filepath.Join(t.TempDir(), "runs"))
	require.NoError(t, rd.Init())
	// A grant the store does not hold for this host goes at the first sync.
	require.NoError(t, rd.SaveGrant(testGrant("stale")))
	require.NoError(t, coord.CreateGrant("hb", testGrant("bob")))
	require.NoError(t, coord.CreateGrant("ha", testGrant("alice")))
	require.ErrorIs(t, coord.CreateGrant("hb", testGrant("bob")), ErrGrantExists)

	var mu sync.Mutex
	var recs []string
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, hb.SyncGrants(ctx, rd, func(kind ledger.Kind, g *grants.Grant, _ string) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, string(kind)+" "+g.GrantID)
	}))
	gs, err := rd.LoadGrants()
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, "G-bob", gs[0].Grant.GrantID)
	mu.Lock()
	require.Equal(t, []string{"grant_created G-bob", "grant_revoked G-stale"}, recs)
	mu.Unlock()

	e, err := coord.FindGrant("bob")
	require.NoError(t, err)
	require.Equal(t, "hb", e.Host)
	e.Grant.Revoked, e.Grant.RevokedAt = true, "2026-01-02T00:00:00Z"
	require.NoError(t, coord.UpdateGrant(e))
	require.Error(t, coord.UpdateGrant(e), "a second update from the same revision conflicts")
	require.Eventually(t, func() bool {
		g, _, err := rd.FindGrant("G-bob")
		return err == nil && g.Revoked
	}, 10*time.Second, 10*time.Millisecond)

	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	require.NoError(t, coord.grants.Delete(ctx2, grantKey("hb", "G-bob")))
	require.Eventually(t, func() bool {
		_, err := os.Stat(rd.GrantPath("G-bob"))
		return os.IsNotExist(err)
	}, 10*time.Second, 10*time.Millisecond)
}
