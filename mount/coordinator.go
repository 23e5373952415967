package mount

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	acpfs "github.com/acpfs/acpfs/fs"
	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// CoordinatorConfig describes `acpfs up`: every grant of a run directory
// mounted under one root, sharing one protocol log, one ledger writer and
// one folder watcher.
type CoordinatorConfig struct {
	Runs        grants.RunDir
	Folder      string
	Root        string // views are mounted at Root/<agent_id>
	Log         *protocol.Log
	Ledger      *ledger.Writer
	AuditReads  bool
	Passthrough bool
	AllowOther  bool
	// Participants are the ACP participants of the folder; a grant for
	// anyone else is refused.
	Participants []string
}

// StatusFile is written in the run directory so that `acpfs status` (a
// separate process) can list what the coordinator serves.
const StatusFile = "acpfs-up.json"

// ViewStatus is one mounted view as listed by `acpfs status`.
type ViewStatus struct {
	Agent      string `json:"agent"`
	Grant      string `json:"grant"`
	Mountpoint string `json:"mountpoint"`
}

// CoordinatorStatus is the content of StatusFile.
type CoordinatorStatus struct {
	PID     int          `json:"pid"`
	Folder  string       `json:"folder"`
	Root    string       `json:"root"`
	Started string       `json:"started"`
	Views   []ViewStatus `json:"views"`
}

// Coordinator keeps the mounted views in line with the grant files.
type Coordinator struct {
	cfg     CoordinatorConfig
	watcher *acpfs.Watcher
	fsw     *fsnotify.Watcher
	started time.Time

	mu    sync.Mutex
	views map[string]*coordView // by agent id
	done  chan struct{}
	stop  chan struct{}
}

type coordView struct {
	grantID string
	m       *Mount
}

// StartCoordinator checks the run directory and the mount root, mounts
// every active grant and starts following changes. Any problem found
// before mounting (an unknown participant, two grants for one agent, a
// mount root that is not empty) is returned with nothing mounted.
func StartCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	if err := checkEmptyRoot(cfg.Root); err != nil {
		return nil, err
	}
	gs, err := cfg.Runs.LoadGrants()
	if err != nil {
		return nil, fmt.Errorf("grants in %s: %w", cfg.Runs.GrantsDir(), err)
	}
	for _, gf := range gs {
		if err := checkParticipant(gf.Grant, cfg.Participants); err != nil {
			return nil, fmt.Errorf("%s: %w", gf.Path, err)
		}
	}
	hidden, err := cfg.Runs.HiddenIn(cfg.Folder)
	if err != nil {
		return nil, err
	}
	w, err := acpfs.NewWatcher(cfg.Folder, hidden)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{cfg: cfg, watcher: w, started: time.Now().UTC(), views: map[string]*coordView{}, done: make(chan struct{}), stop: make(chan struct{})}
	if err := os.MkdirAll(cfg.Runs.GrantsDir(), 0o755); err != nil {
		w.Close()
		return nil, err
	}
	if err := os.MkdirAll(cfg.Runs.HandoffsDir(), 0o755); err != nil {
		w.Close()
		return nil, err
	}
	if c.fsw, err = fsnotify.NewWatcher(); err != nil {
		w.Close()
		return nil, err
	}
	for _, d := range []string{cfg.Runs.GrantsDir(), cfg.Runs.HandoffsDir()} {
		if err := c.fsw.Add(d); err != nil {
			c.fsw.Close()
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", d, err)
		}
	}
	go c.loop()
	if err := c.reconcile(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func checkEmptyRoot(root string) error {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(root, 0o755)
	}
	if err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("mount root %s is not empty; views are mounted at <root>/<agent_id>", root)
	}
	return nil
}

func checkParticipant(g *grants.Grant, participants []string) error {
	if len(participants) == 0 {
		return nil
	}
	for _, p := range participants {
		if p == g.ParticipantID() {
			return nil
		}
	}
	return fmt.Errorf("grant %s: participant %q is not listed in protocol.json (%s)", g.GrantID, g.ParticipantID(), strings.Join(participants, ", "))
}

// loop applies grant and handoff changes. Events are coalesced briefly
// because one save is several events (create, write, rename).
func (c *Coordinator) loop() {
	defer close(c.done)
	var timer <-chan time.Time
	for {
		select {
		case <-c.stop:
			return
		case _, ok := <-c.fsw.Events:
			if !ok {
				return
			}
			if timer == nil {
				timer = time.After(20 * time.Millisecond)
			}
		case err, ok := <-c.fsw.Errors:
			if !ok {
				return
			}
			slog.Warn("grant watcher", "err", err)
		case <-timer:
			timer = nil
			if err := c.reconcile(); err != nil {
				slog.Warn("reconcile grants", "err", err)
			}
		}
	}
}

// reconcile mounts new grants, applies changed ones, and unmounts revoked
// or removed ones.
func (c *Coordinator) reconcile() error {
	gs, loadErr := c.cfg.Runs.LoadGrants()
	want := map[string]grants.GrantFile{}
	var errs []error
	if loadErr != nil {
		errs = append(errs, loadErr)
	}
	for _, gf := range gs {
		g := gf.Grant
		if g.Revoked {
			continue
		}
		if err := checkParticipant(g, c.cfg.Participants); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := want[g.AgentID]; dup {
			continue // CheckSet already reported it; keep the first
		}
		want[g.AgentID] = gf
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for agent, v := range c.views {
		gf, ok := want[agent]
		if !ok || gf.Grant.GrantID != v.grantID {
			// Hide everything first, so the view is dark even if an
			// open file keeps the unmount waiting.
			closed := *v.m.FS.Grant()
			closed.Revoked = true
			_ = v.m.FS.SetGrant(&closed, nil)
			if err := v.m.Stop(); err != nil {
				errs = append(errs, err)
			}
			os.Remove(v.m.cfg.Mountpoint)
			delete(c.views, agent)
		}
	}
	for agent, gf := range want {
		handoffs := c.handoffsFor(gf.Grant)
		if v, ok := c.views[agent]; ok {
			if err := v.m.FS.SetGrant(gf.Grant, handoffs); err != nil {
				errs = append(errs, err)
			}
			v.m.cfg.Handoffs = handoffs
			continue
		}
		mp := filepath.Join(c.cfg.Root, agent)
		if err := os.MkdirAll(mp, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		hidden := []string{c.cfg.Runs.Root, filepath.Dir(c.cfg.Ledger.Path())}
		m, err := Start(Config{
			Folder: c.cfg.Folder, Mountpoint: mp, Grant: gf.Grant, Log: c.cfg.Log, Ledger: c.cfg.Ledger,
			Hidden: hidden, AuditReads: c.cfg.AuditReads, Passthrough: c.cfg.Passthrough, AllowOther: c.cfg.AllowOther, Handoffs: handoffs, Watcher: c.watcher,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("mount %s: %w", agent, err))
			continue
		}
		c.views[agent] = &coordView{grantID: gf.Grant.GrantID, m: m}
	}
	if err := c.writeStatus(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// handoffsFor maps each artifact handed to g's agent to its stored copy.
func (c *Coordinator) handoffsFor(g *grants.Grant) map[string]string {
	hs, err := c.cfg.Runs.HandoffsFor(g.GrantID, g.AgentID)
	if err != nil {
		slog.Warn("load handoffs", "err", err)
	}
	if len(hs) == 0 {
		return nil
	}
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		out[h.ArtifactPath] = c.cfg.Runs.ArtifactPath(h.ArtifactSHA256)
	}
	return out
}

// Status lists the mounted views.
func (c *Coordinator) Status() CoordinatorStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statusLocked()
}

func (c *Coordinator) statusLocked() CoordinatorStatus {
	st := CoordinatorStatus{PID: os.Getpid(), Folder: c.cfg.Folder, Root: c.cfg.Root, Started: c.started.Format(time.RFC3339)}
	for agent, v := range c.views {
		st.Views = append(st.Views, ViewStatus{Agent: agent, Grant: v.grantID, Mountpoint: v.m.cfg.Mountpoint})
	}
	sort.Slice(st.Views, func(i, j int) bool { return st.Views[i].Agent < st.Views[j].Agent })
	return st
}

func (c *Coordinator) writeStatus() error {
	b, err := json.MarshalIndent(c.statusLocked(), "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(c.cfg.Runs.Root, StatusFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// ReadStatus reads the status a coordinator left in a run directory.
func ReadStatus(runs grants.RunDir) (CoordinatorStatus, error) {
	var st CoordinatorStatus
	b, err := os.ReadFile(filepath.Join(runs.Root, StatusFile))
	if err != nil {
		return st, fmt.Errorf("no coordinator status in %s (is `acpfs up` running?): %w", runs.Root, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("coordinator status: %w", err)
	}
	return st, nil
}

// Stop unmounts every view, flushes the ledger and removes the status
// file.
func (c *Coordinator) Stop() error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	close(c.stop)
	c.fsw.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for agent, v := range c.views {
		if err := v.m.Stop(); err != nil {
			errs = append(errs, err)
		}
		os.Remove(v.m.cfg.Mountpoint)
		delete(c.views, agent)
	}
	c.watcher.Close()
	os.Remove(filepath.Join(c.cfg.Runs.Root, StatusFile))
	errs = append(errs, c.cfg.Ledger.Sync())
	return errors.Join(errs...)
}
