package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

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
			if rel == protocol.LockFile {
				// Each host's appenders lock their own copy: a synced
				// one would replace the inode they lock.
				return true
			}
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

// storeXattr, on a collaboration folder, says that `acpfs up --store`
// serves it as one host's copy of a collaboration ("COLLAB HOST"). It is
// a trusted.* attribute: only root can set or remove it, and the views
// refuse to change the folder root's attributes, so no agent and no
// unprivileged writer of the folder can take it away.
const storeXattr = "trusted.acpfs.store"

// markStoreFolder marks folder as a store host's copy.
func markStoreFolder(folder string, st *store.Store) error {
	err := unix.Setxattr(folder, storeXattr, []byte(st.Collab()+" "+st.Host()), 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
		slog.Warn("the folder cannot be marked as a store host's copy: acpfs mount, run and append without --store will not refuse it",
			"folder", folder, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark %s as a store host's copy: %w", folder, err)
	}
	return nil
}

// refuseStoreFolder refuses to serve or change, without the store, a
// folder that `acpfs up --store` serves: its appends would reach one
// host's copy only (and be cut from it), and its writes would go on
// while the host is cut off from the store.
func refuseStoreFolder(folder string) error {
	buf := make([]byte, 256)
	n, err := unix.Getxattr(folder, storeXattr, buf)
	if err != nil {
		return nil
	}
	collab, host, _ := strings.Cut(string(buf[:n]), " ")
	return fmt.Errorf("%s is host %s's copy of collaboration %s, served from a store: use the views of acpfs up --store, or --store with acpfs append (a trusted.acpfs.store attribute on the folder says so; root can remove it with setfattr -x trusted.acpfs.store)",
		folder, host, collab)
}
