package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/atomicfile"
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
// store's before any view starts: the documents (all of them on a host
// whose folder is empty) and the history are copied or checked, and the
// grants assigned to this host are copied; all three are then followed.
// The host's ledger is shipped to the store from then on; the caller
// stops the shipper after closing the ledger's writer, and sets the log
// whose frozen deliverables the document sync checks.
func joinStore(ctx context.Context, st *store.Store, folder string, rd grants.RunDir, lw *ledger.Writer) (*hostSync, error) {
	h := &hostSync{}
	record := func(r ledger.Record) {
		if _, err := lw.Append(r); err != nil {
			slog.Warn("record what the store sync did", "kind", r.Kind, "err", err)
		}
	}
	hidden, err := rd.HiddenIn(folder)
	if err != nil {
		return nil, err
	}
	docs, err := store.SyncDocs(ctx, st, folder, store.DocsOptions{
		Skip: func(rel string) bool {
			return slices.ContainsFunc(hidden, func(h string) bool { return rel == h || strings.HasPrefix(rel, h+"/") })
		},
		Frozen: h.frozen,
		Record: func(kind, rel, detail string) { record(ledger.Record{Kind: kind, Path: rel, Detail: detail}) },
	})
	if err != nil {
		return nil, err
	}
	h.docs = docs
	if err := docs.Bootstrap(ctx); err != nil {
		docs.Close()
		return nil, fmt.Errorf("copy the documents from the store: %w", err)
	}
	if err := st.Events().Seed(folder); err != nil {
		docs.Close()
		return nil, err
	}
	err = st.SyncGrants(ctx, rd, func(kind string, g *grants.Grant, detail string) {
		record(ledger.Record{Kind: kind, Agent: g.AgentID, Grant: g.GrantID, Detail: detail})
	})
	if err == nil {
		h.ship, err = store.ShipLedger(ctx, st, lw.Path(), filepath.Join(filepath.Dir(lw.Path()), ledger.PublicKeyFile))
	}
	if err != nil {
		docs.Close()
		return nil, err
	}
	return h, nil
}

// hostSync is what a host runs beside its views to stay a copy.
type hostSync struct {
	docs *store.Docs
	ship *store.Shipper
	log  atomic.Pointer[protocol.Log]
}

// frozen answers the document sync from the history once the log is
// open: before, while the documents are first copied, nothing is frozen
// on this host yet.
func (h *hostSync) frozen(rel string) (string, bool) {
	l := h.log.Load()
	if l == nil {
		return "", false
	}
	sha, ok := l.Snapshot().Frozen[rel]
	return sha, ok
}

// stop ends the document sync and ships the ledger's last records (its
// writer closed first, so that they are signed).
func (h *hostSync) stop(lw *ledger.Writer) error {
	derr := h.docs.Close()
	lw.Close()
	return errors.Join(derr, h.ship.Stop())
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

// storeHostFile, in a run directory, says that `acpfs up --store` serves
// its folder as one host of a collaboration; it holds the collaboration's
// name and the host's.
const storeHostFile = "store-host.json"

type storeHost struct {
	Store  string `json:"store"`
	Collab string `json:"collab"`
	Host   string `json:"host"`
}

// markStoreHost records in the run directory that its folder is a copy
// served from a store.
func markStoreHost(rd grants.RunDir, sf storeFlags, host string) error {
	data, err := json.MarshalIndent(storeHost{Store: sf.url, Collab: sf.collab, Host: host}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(rd.Root, storeHostFile), append(data, '\n'), 0o644)
}

// refuseStoreHost refuses a view that would serve a store host's folder
// without the store: its appends would reach that host's copy only, and
// its writes would go on while the host is cut off. (The host's own
// coordinator cuts such lines from the copy; refusing says why at once.)
func refuseStoreHost(runDir string) error {
	data, err := os.ReadFile(filepath.Join(runDir, storeHostFile))
	if err != nil {
		return nil
	}
	var h storeHost
	_ = json.Unmarshal(data, &h)
	return fmt.Errorf("%s belongs to host %s of collaboration %s, served from a store: serve its agents through the views of acpfs up --store, which this command does not join (%s)",
		runDir, h.Host, h.Collab, filepath.Join(runDir, storeHostFile))
}
