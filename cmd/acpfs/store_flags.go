package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
	"github.com/acpfs/acpfs/store"
)

// storeFlags select a collaboration served from several hosts through a
// NATS JetStream server (see docs/multihost.md). Without --store a
// command works on the local folder alone.
type storeFlags struct {
	url, collab, host string
	replicas          int
}

func (f *storeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.url, "store", "", "NATS server(s) of a collaboration served from several hosts (nats://HOST:PORT[,...]); default: this folder alone")
	fl.StringVar(&f.collab, "collab", "", "collaboration name in the store (with --store)")
	fl.StringVar(&f.host, "host", "", "this host's name in the store (default: the machine's host name)")
	fl.IntVar(&f.replicas, "replicas", 1, "with --store: copies a cluster keeps of each stream, set by the command that creates the collaboration (3 on a 3-node cluster)")
}

func (f *storeFlags) set() bool { return f.url != "" }

// open connects, or returns nil without --store. Only the commands that
// may start a collaboration (up, grant create) create it when it is
// missing.
func (f *storeFlags) open(ctx context.Context, create bool) (*store.Store, error) {
	if !f.set() {
		if f.collab != "" {
			return nil, errors.New("--collab needs --store")
		}
		return nil, nil
	}
	if f.collab == "" {
		return nil, errors.New("--store needs --collab NAME")
	}
	return store.Open(ctx, store.Options{URL: f.url, Collab: f.collab, Host: f.host, Replicas: f.replicas, Existing: !create})
}

// joinStore makes this host's folder and run directory copies of the
// store's before any view starts: the history is seeded or checked, and
// the grants assigned to this host are copied (and then followed). The
// host's ledger is shipped to the store from then on; the caller stops
// the shipper after closing the ledger's writer.
func joinStore(ctx context.Context, st *store.Store, folder string, rd grants.RunDir, lw *ledger.Writer) (*store.Shipper, error) {
	if err := st.Events().Seed(folder); err != nil {
		return nil, err
	}
	rec := func(kind string, g *grants.Grant, detail string) {
		if _, err := lw.Append(ledger.Record{Kind: kind, Agent: g.AgentID, Grant: g.GrantID, Detail: detail}); err != nil {
			slog.Warn("record a grant from the store", "grant", g.GrantID, "err", err)
		}
	}
	if err := st.SyncGrants(ctx, rd, rec); err != nil {
		return nil, err
	}
	return store.ShipLedger(ctx, st, lw.Path(), filepath.Join(filepath.Dir(lw.Path()), ledger.PublicKeyFile))
}

// followStore makes the store the authority for log's history and keeps
// the folder caught up with it until ctx ends.
func followStore(ctx context.Context, st *store.Store, log *protocol.Log) error {
	log.SetReplica(st.Events())
	if _, err := log.Pull(); err != nil {
		return err
	}
	return st.Events().Follow(ctx, log)
}
