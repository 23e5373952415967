package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/safeio"
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

// coordinatorDirsIn returns a test of whether a folder-relative path is
// a run directory or a ledger's directory (grants.IsCoordinatorDir) on
// disk now, resolved beneath the folder without following symlinks, and
// the function that releases the folder's descriptor.
func coordinatorDirsIn(folder string) (func(rel string) bool, func(), error) {
	fd, err := unix.Open(folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open folder %s: %w", folder, err)
	}
	test := func(rel string) bool {
		d, err := safeio.OpenBeneath(fd, rel, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return false // not a directory (or gone): its own checks decide
		}
		defer unix.Close(d)
		return grants.IsCoordinatorDir(d)
	}
	return test, func() { unix.Close(fd) }, nil
}

// joinStore makes this host's folder and run directory copies of the
// store's before any view starts: the documents (all of them on a host
// whose folder is empty) and the history are copied or checked, and the
// grants assigned to this host are copied; all three are then followed.
// The host's ledger is shipped to the store from then on; the caller
// stops the shipper after closing the ledger's writer, and sets the log
// whose frozen deliverables the document sync checks. A host whose
// folder lacks protocol.json or the history waits up to wait for
// another host to publish them (see awaitPublished), saying so on
// progress.
func joinStore(ctx context.Context, st *store.Store, folder string, rd grants.RunDir, lw *ledger.Writer, wait time.Duration, progress io.Writer) (*hostSync, error) {
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
	inCoordinatorDir, closeFolder, err := coordinatorDirsIn(folder)
	if err != nil {
		return nil, err
	}
	h.closeFolder = closeFolder
	docs, err := store.SyncDocs(ctx, st, folder, store.DocsOptions{
		Skip: func(rel string) bool {
			if rel == protocol.LockFile {
				// Each host's appenders lock their own copy: a synced
				// one would replace the inode they lock.
				return true
			}
			// The run directory where it was at start, and any run or
			// ledger directory wherever it is now (moved into the folder,
			// another coordinator's): never published, never replaced.
			return slices.ContainsFunc(hidden, func(h string) bool { return rel == h || strings.HasPrefix(rel, h+"/") }) ||
				grants.IsReservedName(path.Base(rel)) || inCoordinatorDir(rel)
		},
		Frozen: h.frozen,
		Record: func(kind ledger.Kind, rel, detail string) {
			record(ledger.Record{Kind: kind, Path: rel, Detail: detail})
		},
	})
	if err != nil {
		return nil, err
	}
	h.docs = docs
	if err := docs.Bootstrap(ctx); err != nil {
		docs.Close()
		return nil, fmt.Errorf("copy the documents from the store: %w", err)
	}
	if err := awaitPublished(ctx, st, docs, folder, wait, progress); err != nil {
		docs.Close()
		return nil, err
	}
	if err := st.Events().Seed(folder); err != nil {
		docs.Close()
		return nil, err
	}
	err = st.SyncGrants(ctx, rd, func(kind ledger.Kind, g *grants.Grant, detail string) {
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

// storeWaitEvery is how often a host waiting for the store says so.
const storeWaitEvery = 5 * time.Second

// awaitPublished makes a host whose folder is empty (or lacks
// protocol.json or events.jsonl) wait, up to wait, until the host that
// initialized the collaboration has published them, then copies
// protocol.json into the folder; the history is copied when the log
// first pulls it. Hosts are started in any order: without the wait, a
// host started a moment before the first one published stopped at once.
func awaitPublished(ctx context.Context, st *store.Store, docs *store.Docs, folder string, wait time.Duration, progress io.Writer) error {
	need := store.Missing{
		Protocol: !present(filepath.Join(folder, protocol.ProtocolFile)),
		History:  !present(filepath.Join(folder, protocol.EventsFile)),
	}
	if !need.Any() {
		return nil
	}
	// SIGINT or SIGTERM ends the wait as an error, so that the ledger is
	// closed and signed on the way out; the views catch them later.
	wctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	err := st.WaitPublished(wctx, need, wait, storeWaitEvery, func(m store.Missing, waited time.Duration) {
		fmt.Fprintf(progress, "acpfs up: waiting for collaboration %s in the store: %s yet (%s of %s)\n",
			st.Collab(), m, store.Seconds(waited), store.Seconds(wait))
	})
	interrupted := wctx.Err() != nil && ctx.Err() == nil
	stop()
	if interrupted {
		return fmt.Errorf("interrupted while waiting for collaboration %s in the store", st.Collab())
	}
	if err != nil {
		return err
	}
	if !need.Protocol {
		return nil
	}
	// The bucket holds it now: the sync applies it like any document.
	sctx, cancel := context.WithTimeout(ctx, max(wait, time.Minute))
	defer cancel()
	if err := docs.Sync(sctx); err != nil {
		return fmt.Errorf("copy %s from the store: %w", protocol.ProtocolFile, err)
	}
	if !present(filepath.Join(folder, protocol.ProtocolFile)) {
		return fmt.Errorf("collaboration %s: the store's %s was not copied into %s (refused: see this host's ledger)",
			st.Collab(), protocol.ProtocolFile, folder)
	}
	return nil
}

// present reports whether path is a non-empty regular file (not
// followed if it is a link: the sync never writes one).
func present(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}

// hostSync is what a host runs beside its views to stay a copy.
type hostSync struct {
	// closeFolder releases the folder descriptor the sync's Skip reads.
	closeFolder func()
	docs        *store.Docs
	ship        *store.Shipper
	log         atomic.Pointer[protocol.Log]
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
	if h.closeFolder != nil {
		h.closeFolder()
	}
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
