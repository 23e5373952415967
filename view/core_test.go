package view

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// TestAppendsThroughViewsToCompletion: the whole collaboration appended
// line by line through the two agents' views, each line recorded as
// accepted before it lands, protocol.json following at once; then the
// primary deliverable is frozen for every view.
func TestAppendsThroughViewsToCompletion(t *testing.T) {
	c := newCollab(t)
	views := map[string]*View{"alice": c.newView(ownerGrant()), "bob": c.newView(reviewerGrant())}
	for i, s := range acpSteps() {
		seq := i + 2
		before := c.lastSeq()
		_, err := appendVia(views[s.from], s.line(c, seq))
		require.NoError(t, err, "seq %d %s: %s", seq, s.event, views[s.from].LastError())
		assert.True(t, hasRecord(c.since(before), ledger.KindAppendAccepted, s.from, protocol.EventsFile, "append", ""), "seq %d recorded", seq)
		lines := strings.Count(c.read(protocol.EventsFile), "\n")
		assert.Equal(t, seq, lines)
	}
	ctx := context.Background()
	for _, f := range views {
		assert.True(t, f.frozen(primaryRef))
		pj, _, errno := f.Open(ctx, nil, protocol.ProtocolFile, syscall.O_RDONLY)
		require.Zero(t, errno)
		b, errno := pj.Read(ctx, make([]byte, 1<<16), 0)
		require.Zero(t, errno)
		assert.Contains(t, string(b), "completed")
		st, errno := pj.Getattr(ctx)
		require.Zero(t, errno)
		assert.EqualValues(t, len(b), st.Size, "protocol.json's size is that of the content served")
		require.Zero(t, pj.Release(ctx))
	}
	status, errno := views["alice"].statusText(ctx)
	require.Zero(t, errno)
	assert.Contains(t, string(status), "phase: completed")
	// .acpfs/wait returns at once: the collaboration ended.
	w, errno := views["bob"].waitTurn(ctx)
	require.Zero(t, errno)
	assert.True(t, bytes.HasPrefix(w, []byte("ready: ")), string(w))
	_ = os.Remove
}
