package drive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/scratch"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
)

// Options are how the driver runs, beside the collaboration file.
type Options struct {
	// Self is the acpfs binary the driver runs its commands with
	// (default /proc/self/exe).
	Self string
	// Out receives the progress; Mode is ModePlain, ModeTTY or ModeJSON.
	Out  io.Writer
	Mode string
	// Grace is how long a stopped turn has between SIGTERM and SIGKILL
	// (default 5s).
	Grace time.Duration
	// Output bounds what each turn's output costs (its log, what the
	// progress shows of it); zero fields take DefaultOutputLimits.
	Output OutputLimits
	// Failpoint, for crash tests, names the moment at which the driver
	// kills itself with SIGKILL, as a kill -9 landing there would:
	// POINT or POINT:PARTICIPANT, POINT one of the Fail* names, reached
	// the first time (by that participant). Empty: never.
	Failpoint string
}

// The moments a Failpoint may name.
const (
	FailInitialized = "initialized" // the folder was initialized, no grant created yet
	FailGranted     = "granted"     // a participant's grant was created, the next ones not yet
	FailReceipt     = "receipt"     // a turn's receipt is on disk (running), its sandbox not started
	FailRecorded    = "recorded"    // a turn's record is in the ledger, its receipt still says running
	FailEnded       = "ended"       // a turn's receipt says done (a turn its events woke may have started already)
	FailBlocking    = "blocking"    // blocked is about to be appended on a participant's behalf
	FailBlocked     = "blocked"     // blocked was appended on a participant's behalf, not yet noted
)

// Result is how a drive ended.
type Result struct {
	// Reason is completed, blocked, or why the driver stopped otherwise.
	Reason  string
	Phase   string
	Turns   int
	Verdict string // the audit's verdict, "" when it did not run
	Audit   string // the Markdown report's path
}

// Completed reports whether the collaboration reached completed.
func (r Result) Completed() bool { return r.Phase == protocol.PhaseCompleted }

// driver is one run of `acpfs drive`.
type driver struct {
	cfg   *Config
	opts  Options
	rd    grants.RunDir
	out   *progress
	scan  *ledgerScan
	lw    *ledger.Writer
	log   *protocol.Log
	coord *mount.Coordinator

	grantIDs  map[string]string // participant -> grant id
	failures  map[string]int
	lastError map[string]string
	running   map[string]*turn
	done      chan *turn
	turns     int
	runEnv    bool // acpfs run takes --env
}

// turn is a running turn.
type turn struct {
	rc      *Receipt
	p       *Participant
	proc    *os.Process
	started chan error
	exit    int
	err     error
	output  Output // what the turn printed, and what its log keeps
	limit   string // acpfs run's line naming the limits the command ran into

	// mu guards what the timeout's goroutine sets.
	mu       sync.Mutex
	timedOut bool
	stopped  bool
	timer    *time.Timer
	killer   *time.Timer
}

// Drive runs the collaboration of cfg to its end (or until ctx is
// done), then audits it.
func Drive(ctx context.Context, cfg *Config, opts Options) (Result, error) {
	if opts.Self == "" {
		opts.Self = "/proc/self/exe"
	}
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	d := &driver{
		cfg: cfg, opts: opts, rd: grants.NewRunDir(cfg.Runs), out: newProgress(opts.Out, opts.Mode),
		grantIDs: map[string]string{}, lastError: map[string]string{}, running: map[string]*turn{},
		done: make(chan *turn, len(cfg.Participants)),
	}
	defer d.out.done()
	if err := os.MkdirAll(filepath.Join(cfg.Runs, TurnsDir), 0o700); err != nil {
		return Result{}, err
	}
	unlock, err := lockDriver(cfg.Runs)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	d.sweepScratch()
	// acpfs run passes its environment to the command, which the driver
	// builds; a run that takes --env (names to pass) gets them named too.
	help, _ := d.acpfs("run", "--help")
	d.runEnv = strings.Contains(help, "--env ")
	if err := d.prepareFolder(); err != nil {
		return Result{}, err
	}
	if err := d.prepareGrants(); err != nil {
		return Result{}, err
	}
	res, err := d.serve(ctx)
	if err != nil {
		return res, err
	}
	res.Turns = d.turns
	res.Verdict, res.Audit = d.audit()
	return res, nil
}

// lockDriver holds RUNS/.acpfs-drive.lock: one driver per run directory.
// The lock dies with the process, so a killed driver never blocks the
// next one.
func lockDriver(runs string) (func(), error) {
	p := filepath.Join(runs, ".acpfs-drive.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("driver lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		return nil, fmt.Errorf("another acpfs drive (pid %s) drives %s", strings.TrimSpace(string(pid)), runs)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// TurnScratchPrefix begins the name of a turn's input directory under
// the temporary directory (see internal/scratch: named after the driver
// that made it, removed by the next one once that driver is gone).
const TurnScratchPrefix = "acpfs-turn-"

// sweepScratch removes what drivers and runs killed with SIGKILL left
// under the temporary directory: the input directories of their turns
// and the scratch directories of their sandboxes, once the process that
// made each is gone.
func (d *driver) sweepScratch() {
	// A turn's acpfs run gets the driver's TMPDIR only when the
	// participant's env names it: its scratch directory is in /tmp
	// otherwise.
	sweeps := []struct{ dir, prefix string }{{os.TempDir(), TurnScratchPrefix}, {os.TempDir(), mount.RunScratchPrefix}}
	if filepath.Clean(os.TempDir()) != "/tmp" {
		sweeps = append(sweeps, struct{ dir, prefix string }{"/tmp", mount.RunScratchPrefix})
	}
	for _, sw := range sweeps {
		removed, err := scratch.Sweep(sw.dir, sw.prefix)
		if len(removed) > 0 {
			d.out.notef(NoteInfo, "", "", "removed %d directory(ies) %s* of processes that are gone from %s", len(removed), sw.prefix, sw.dir)
		}
		if err != nil {
			d.out.notef(NoteInfo, "", "", "%v", err)
		}
	}
}

// reach kills the driver with SIGKILL when the Failpoint names point
// (for participant), and never returns then.
func (d *driver) reach(point, participant string) {
	if d.opts.Failpoint == "" {
		return
	}
	p, who, _ := strings.Cut(d.opts.Failpoint, ":")
	if p != point || (who != "" && who != participant) {
		return
	}
	slog.Debug("failpoint reached: SIGKILL", "point", point, "participant", participant)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process before anything else runs here
}

// acpfs runs an acpfs command to its end and returns its output.
func (d *driver) acpfs(args ...string) (string, error) {
	c := exec.Command(d.opts.Self, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := c.Run()
	if err != nil {
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(errb.String()), "error: "))
		return out.String(), fmt.Errorf("acpfs %s: %s (%w)", args[0]+" "+subcommand(args), msg, err)
	}
	return out.String(), nil
}

func subcommand(args []string) string {
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		return args[1]
	}
	return ""
}

// prepareFolder initializes the folder, or checks that the one there is
// this collaboration's and resumes it.
func (d *driver) prepareFolder() error {
	c := d.cfg
	if _, err := os.Stat(filepath.Join(c.Folder, protocol.ProtocolFile)); err == nil {
		proto, err := protocol.LoadProtocol(c.Folder)
		if err != nil {
			return fmt.Errorf("resume %s: %w", c.Folder, err)
		}
		have, want := proto.ParticipantIDs(), c.IDs()
		if !slices.Equal(slices.Sorted(slices.Values(have)), slices.Sorted(slices.Values(want))) {
			return fmt.Errorf("resume %s: its participants are %v, the collaboration file's %v", c.Folder, have, want)
		}
		l, err := protocol.OpenLog(c.Folder)
		if err != nil {
			return err
		}
		s := l.Snapshot()
		l.Close()
		d.out.notef(NoteInfo, "", "", "resuming %s from its history: phase %s, last seq %d", c.Folder, s.Phase, s.LastSeq)
		return nil
	}
	args := []string{"init", "--folder", c.Folder, "--objective", c.Objective}
	for _, id := range c.IDs() {
		args = append(args, "--participant", id)
	}
	for _, g := range c.Completion {
		args = append(args, "--completion", g)
	}
	args = append(args, "--primary-deliverable-type", c.Deliverable.Type)
	if c.Deliverable.Type == protocol.CustomType {
		args = append(args, "--primary-deliverable-file", c.Deliverable.File)
		for _, s := range c.Deliverable.Check {
			args = append(args, "--primary-deliverable-check", s)
		}
	}
	if _, err := d.acpfs(args...); err != nil {
		return err
	}
	d.out.notef(NoteInfo, "", "", "initialized %s (%s owns the proposal)", c.Folder, c.Participants[0].ID)
	d.reach(FailInitialized, "")
	return nil
}

// wantedGrant is the grant the file asks for participant p.
func wantedGrant(p *Participant) (read, write []string, err error) {
	if p.Grant.Preset != "" {
		pr, err := grants.Preset(p.Grant.Preset, "")
		if err != nil {
			return nil, nil, err
		}
		read, write = pr.MayRead, pr.MayWrite
	}
	add := func(base, more []string) []string {
		for _, m := range more {
			if !slices.Contains(base, m) {
				base = append(base, m)
			}
		}
		return base
	}
	return add(slices.Clone(read), p.Grant.MayRead), add(slices.Clone(write), p.Grant.MayWrite), nil
}

// grantMatches reports whether g is the grant the file asks for p, whose
// may_read and may_write (preset and extras) are read and write.
func grantMatches(g *grants.Grant, p *Participant, read, write []string) bool {
	return sameSet(g.MayRead, read) && sameSet(g.MayWrite, write) && sameSet(g.ForbiddenRead, p.Grant.Forbid) &&
		(p.Grant.Role == "" || p.Grant.Role == g.Role) && g.ParticipantID() == p.ID &&
		(p.Grant.Objective == "" || p.Grant.Objective == g.Objective)
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Compact(slices.Sorted(slices.Values(a))), slices.Compact(slices.Sorted(slices.Values(b))))
}

// prepareGrants creates each participant's grant, keeps one that is as
// the file says, and replaces one that is not (revoked, and a new one
// created under the next free id).
func (d *driver) prepareGrants() error {
	existing, _ := d.rd.LoadGrants()
	for i := range d.cfg.Participants {
		p := &d.cfg.Participants[i]
		read, write, err := wantedGrant(p)
		if err != nil {
			return err
		}
		id := ""
		if gf, ok := grants.ActiveGrantFor(existing, p.ID); ok {
			g := gf.Grant
			if grantMatches(g, p, read, write) {
				d.grantIDs[p.ID] = g.GrantID
				continue
			}
			if _, err := d.acpfs("grant", "revoke", "--runs", d.cfg.Runs, "--grant", g.GrantID,
				"--reason", "acpfs drive: the collaboration file changed this grant"); err != nil {
				return err
			}
			for n := 2; ; n++ {
				id = fmt.Sprintf("G-%s-%d", p.ID, n)
				if _, err := os.Lstat(d.rd.GrantPath(id)); err != nil {
					break
				}
			}
			d.out.notef(NoteInfo, p.ID, "", "grant %s differs from the collaboration file: revoked, replaced by %s", g.GrantID, id)
		}
		args := []string{"grant", "create", "--runs", d.cfg.Runs, "--folder", d.cfg.Folder, "--agent", p.ID}
		if id != "" {
			args = append(args, "--id", id)
		}
		if p.Grant.Preset != "" {
			args = append(args, "--preset", p.Grant.Preset)
		}
		if p.Grant.Role != "" {
			args = append(args, "--role", p.Grant.Role)
		}
		if p.Grant.Objective != "" {
			args = append(args, "--objective", p.Grant.Objective)
		}
		for _, g := range p.Grant.MayRead {
			args = append(args, "--may-read", g)
		}
		for _, g := range p.Grant.MayWrite {
			args = append(args, "--may-write", g)
		}
		for _, g := range p.Grant.Forbid {
			args = append(args, "--forbid", g)
		}
		if _, err := d.acpfs(args...); err != nil {
			return err
		}
		if id == "" {
			id = grants.GrantIDFor(p.ID)
		}
		d.grantIDs[p.ID] = id
		d.reach(FailGranted, p.ID)
	}
	return nil
}

// serve starts the coordinator, recovers interrupted turns and runs the
// loop; the views are unmounted and the ledger closed when it returns.
func (d *driver) serve(ctx context.Context) (Result, error) {
	c := d.cfg
	if err := os.MkdirAll(c.Root, 0o755); err != nil {
		return Result{}, err
	}
	lw, err := ledger.Open(d.rd.LedgerPath(), ledger.Options{})
	if err != nil {
		return Result{}, fmt.Errorf("open the ledger: %w", err)
	}
	d.lw = lw
	defer lw.Close()
	d.scan = newLedgerScan(d.rd.LedgerPath())
	if err := d.recover(); err != nil {
		return Result{}, err
	}
	log, err := protocol.OpenLog(c.Folder)
	if err != nil {
		return Result{}, err
	}
	d.log = log
	defer log.Close()
	proto, err := protocol.LoadProtocol(c.Folder)
	if err != nil {
		return Result{}, err
	}
	coord, err := mount.StartCoordinator(mount.CoordinatorConfig{
		Runs: d.rd, Folder: c.Folder, Root: c.Root, Log: log, Ledger: lw,
		Participants: proto.ParticipantIDs(), Notify: notifyWriter{d.out},
	})
	if err != nil {
		return Result{}, fmt.Errorf("serve the views: %w", err)
	}
	d.coord = coord
	d.out.notef(NoteInfo, "", "", "serving %d view(s) under %s", len(coord.Status().Views), c.Root)
	res := d.loop(ctx)
	if err := coord.Stop(); err != nil {
		slog.Warn("stop the views", "err", err)
	}
	return res, nil
}

// notifyWriter passes the coordinator's lines on as notes.
type notifyWriter struct{ p *progress }

func (n notifyWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			n.p.notef(NoteInfo, "", "", "%s", l)
		}
	}
	return len(b), nil
}

// recover closes the receipts of turns a killed driver left running,
// writes the turn records it did not write, and counts each
// participant's retries from the receipts.
func (d *driver) recover() error {
	rs, err := loadReceipts(d.cfg.Runs)
	if err != nil {
		return err
	}
	if err := d.scan.update(); err != nil {
		return err
	}
	for _, rc := range rs {
		rec, recorded := d.scan.turns[rc.ID]
		switch {
		case rc.State == StateRunning && recorded:
			// Killed between the turn record and the receipt: the record
			// says how the turn ended.
			t := rec.turn
			rc.State, rc.End, rc.Exit, rc.Signal, rc.Outcome, rc.Limits = StateDone, t.End, t.Exit, t.Signal, t.Outcome, t.Limits
			fallthrough
		case rc.State == StateRunning:
			if rc.Inputs != "" {
				_ = os.RemoveAll(rc.Inputs)
			}
			evs, err := eventsFrom(d.cfg.Folder, rc.Participant, rc.Wake)
			if err != nil {
				return err
			}
			rc.Events = evs
			d.scan.fill(rc, rc.End)
			d.closeInterrupted(rc)
		}
		if rc.LedgerSeq == 0 {
			if recorded {
				rc.LedgerSeq = rec.seq
			} else if err := d.recordTurn(rc); err != nil {
				return err
			}
		}
		if err := rc.save(d.cfg.Runs); err != nil {
			return err
		}
	}
	d.failures = Failures(rs)
	for _, rc := range rs {
		if d.failures[rc.Participant] > 0 {
			d.lastError[rc.Participant] = rc.LastError
		}
	}
	d.turns = len(rs)
	return nil
}

// closeInterrupted closes the receipt of a turn a killed driver left
// running, whose events and ledger records are filled in: from its turn
// record when the driver wrote one (its state is done then), else as
// interrupted. Its fields agree as a turn the driver saw end would have
// them: an accepted event makes it appended, with no last error.
func (d *driver) closeInterrupted(rc *Receipt) {
	var timeout time.Duration
	if p := d.cfg.Participant(rc.Participant); p != nil {
		timeout = p.Timeout
	}
	if rc.State == StateRunning {
		rc.State, rc.End, rc.Exit = StateDone, now(), -1
		rc.Note = "the driver stopped during this turn (killed?); closed when it started again"
		setOutcome(rc, nil, false, true)
		d.out.notef(NoteInfo, rc.Participant, rc.ID, "turn %s was interrupted by the driver's end; it appended %d event(s)", rc.ID, len(rc.Events))
		if len(rc.Events) == 0 {
			rc.LastError = "the previous attempt was interrupted: the driver stopped during it"
			return
		}
	}
	rc.LastError = lastErrorOf(rc, timeout, nil)
}

// recordTurn appends the receipt's turn record to the ledger.
func (d *driver) recordTurn(rc *Receipt) error {
	r, err := d.lw.Append(rc.record(d.cfg.Runs))
	if err != nil {
		return fmt.Errorf("record turn %s: %w", rc.ID, err)
	}
	rc.LedgerSeq = r.Seq
	return nil
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// loop wakes the participants until the collaboration ends.
func (d *driver) loop(ctx context.Context) Result {
	deadline := time.NewTimer(d.cfg.Deadline)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	stopping, reason := false, ""
	lastPhase, lastSeq, lastDraw := "", -1, time.Now()
	// Set to nil once they fired: a closed Done would wake the loop
	// again and again while the stopped turns end.
	ctxDone, deadlineC := ctx.Done(), deadline.C
	for {
		if err := d.log.Refresh(); err != nil {
			slog.Warn("refresh the history", "err", err)
		}
		s := d.log.Snapshot()
		if s.Phase != lastPhase {
			d.out.notef(NotePhase, "", "", "phase %s, waiting for %s (seq %d)", s.Phase, orNone(s.WaitingFor), s.LastSeq)
			lastPhase = s.Phase
		}
		if s.LastSeq != lastSeq {
			d.out.update(func(st *status) { st.phase, st.events = s.Phase, s.LastSeq })
			lastSeq = s.LastSeq
		}
		running := map[string]bool{}
		for id := range d.running {
			running[id] = true
		}
		dec := Decide(State{Phase: s.Phase, Waiting: s.WaitingFor, LastSeq: s.LastSeq, Running: running, Failures: d.failures, Stopping: stopping}, d.cfg)
		for _, id := range dec.GiveUp {
			if r := d.giveUp(id); r != "" {
				stopping, reason = true, r
			}
		}
		if len(dec.GiveUp) > 0 {
			continue // the history changed (blocked) or the loop stops
		}
		for _, w := range dec.Start {
			d.start(w)
		}
		if dec.Done && len(d.running) == 0 {
			if reason == "" {
				reason = dec.Reason
			}
			return Result{Reason: reason, Phase: s.Phase}
		}
		select {
		case t := <-d.done:
			d.finish(t)
		case <-tick.C:
			if d.opts.Mode == ModeTTY && time.Since(lastDraw) > time.Second {
				d.out.tick()
				lastDraw = time.Now()
			}
		case <-ctxDone:
			ctxDone = nil
			if !stopping {
				stopping, reason = true, "stopped by a signal"
				d.out.notef(NoteStopped, "", "", "signal: stopping %d running turn(s)", len(d.running))
				d.stopAll()
			}
		case <-deadlineC:
			deadlineC = nil
			if !stopping {
				stopping, reason = true, fmt.Sprintf("the deadline (%s) passed", d.cfg.Deadline)
				d.out.notef(NoteStopped, "", "", "deadline %s passed: stopping %d running turn(s)", d.cfg.Deadline, len(d.running))
				d.stopAll()
			}
		}
	}
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "nobody"
	}
	return strings.Join(l, ", ")
}

// giveUp handles a participant whose retries are used up: blocked
// appended through its own view when the file says so, else the loop
// stops. It returns the reason to stop, or "".
func (d *driver) giveUp(id string) string {
	p := d.cfg.Participant(id)
	why := d.lastError[id]
	if why == "" {
		why = "no accepted event"
	}
	n := d.failures[id]
	if p.OnExhausted == ExhaustedBlocked {
		summary := fmt.Sprintf("acpfs drive for %s: %d turn(s) in a row appended no accepted event; last: %s", id, n, why)
		d.reach(FailBlocking, id)
		if err := d.appendBlocked(id, summary); err == nil {
			d.reach(FailBlocked, id)
			d.out.notef(NoteGaveUp, id, "", "%s: %d turn(s) appended nothing: appended blocked on its behalf, through its own view (on_exhausted: blocked)", id, n)
			d.failures[id] = 0
			return ""
		} else {
			d.out.notef(NoteGaveUp, id, "", "%s: appending blocked on its behalf failed: %v", id, err)
		}
	}
	r := fmt.Sprintf("%s: %d turn(s) in a row appended no accepted event (last: %s); stopping: give it more retries, or on_exhausted: blocked", id, n, why)
	d.out.notef(NoteGaveUp, id, "", "%s", r)
	d.stopAll()
	return r
}

// appendBlocked appends blocked from participant through its view, so
// that its grant decides whether it may.
func (d *driver) appendBlocked(id, summary string) error {
	view := filepath.Join(d.cfg.Root, id, protocol.EventsFile)
	for try := 0; try < 5; try++ {
		_ = d.log.Refresh()
		s := d.log.Snapshot()
		reply := s.LastSeq
		ev := protocol.Event{Seq: s.LastSeq + 1, From: id, Event: protocol.EvBlocked, At: protocol.FormatTime(time.Now()), Summary: summary, ReplyTo: &reply}
		line, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(view, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(append(line, '\n'))
		cerr := f.Close()
		if err == nil && cerr == nil {
			return nil
		}
		if err == nil {
			err = cerr
		}
		if !errors.Is(err, syscall.EPERM) {
			return err
		}
	}
	return errors.New("events.jsonl kept refusing the line")
}

// start writes the turn's receipt and inputs, then starts its sandbox.
func (d *driver) start(w Wake) {
	p := d.cfg.Participant(w.Participant)
	for {
		if _, err := os.Lstat(receiptPath(d.cfg.Runs, w.ID())); err != nil {
			break
		}
		w.Attempt++ // a receipt of this turn exists: it ran already
	}
	t := &turn{p: p, started: make(chan error, 1)}
	d.running[p.ID] = t
	d.turns++
	rc, argv, env, err := d.prepareTurn(w, p)
	t.rc = rc
	if err != nil {
		d.out.notef(NoteTurnEnded, p.ID, w.ID(), "%s: the turn could not be prepared: %v", p.ID, err)
		t.err = err
		t.exit = -1
		d.done <- t
		return
	}
	d.out.notef(NoteTurnStarted, p.ID, rc.ID, "turn %s: %s (attempt %d, woken by seq %d)", rc.ID, p.ID, rc.Attempt, rc.Wake)
	d.out.update(func(st *status) { st.running = append(st.running, p.ID) })
	go d.runTurn(t, argv, env)
	if err := <-t.started; err == nil && p.Timeout > 0 {
		t.mu.Lock()
		t.timer = time.AfterFunc(p.Timeout, func() { d.stopTurn(t, true) })
		t.mu.Unlock()
	}
}

// prepareTurn writes the turn's inputs (prompt, next action, last
// error) and its receipt, and builds the acpfs run command.
func (d *driver) prepareTurn(w Wake, p *Participant) (*Receipt, []string, []string, error) {
	gid := d.grantIDs[p.ID]
	rc := &Receipt{ID: w.ID(), Participant: p.ID, Grant: gid, Wake: w.Seq, Attempt: w.Attempt, Command: p.Command,
		State: StateRunning, Start: now(), Exit: -1, Events: []EventRef{}, Reads: []string{}, Writes: []string{}, Refusals: []Refusal{}}
	g, err := grants.Load(d.rd.GrantPath(gid))
	if err != nil {
		return rc, nil, nil, err
	}
	rc.GrantSHA256 = g.Hash()
	prompt := grants.Render(g)
	rc.PromptSHA256 = digest.Bytes([]byte(prompt))
	next, err := protocol.NextAction(d.cfg.Folder, p.ID)
	if err != nil {
		return rc, nil, nil, err
	}
	lastErr := ""
	if w.Attempt > 1 {
		lastErr = d.lastError[p.ID]
	}
	files := map[string]string{"prompt.md": prompt, "next-action": next, "last-error": lastErr}
	// A copy for the record, in the run directory no agent sees...
	keep := filepath.Join(d.cfg.Runs, TurnsDir, rc.ID)
	if err := writeFiles(keep, 0o700, 0o600, files); err != nil {
		return rc, nil, nil, err
	}
	// ...and the one the command reads, outside the run directory and
	// the folder (acpfs run shows neither), removed after the turn.
	inputs, err := scratch.Mkdir("", TurnScratchPrefix)
	if err != nil {
		return rc, nil, nil, err
	}
	rc.Inputs = inputs
	if err := writeFiles(inputs, 0o755, 0o644, files); err != nil {
		return rc, nil, nil, err
	}
	env := d.turnEnv(p, rc, inputs, next, lastErr)
	argv := []string{"run", "--folder", d.cfg.Folder, "--runs", d.cfg.Runs, "--grant", gid, "--ro", inputs}
	switch p.Network.Mode {
	case NetHost:
		argv = append(argv, "--net", "host")
	case NetAllow:
		argv = append(argv, "--net", "allow="+strings.Join(p.Network.Allow, ","))
	default:
		argv = append(argv, "--net", "none")
	}
	if p.Limits.Memory != "" {
		argv = append(argv, "--memory", p.Limits.Memory)
	}
	if p.Limits.Pids > 0 {
		argv = append(argv, "--pids", strconv.FormatInt(p.Limits.Pids, 10))
	}
	if p.Limits.CPU > 0 {
		argv = append(argv, "--cpu", strconv.FormatFloat(p.Limits.CPU, 'f', -1, 64))
	}
	for _, r := range p.RO {
		argv = append(argv, "--ro", r)
	}
	for _, r := range p.RW {
		argv = append(argv, "--rw", r)
	}
	if d.runTakesEnv() {
		for _, kv := range env {
			argv = append(argv, "--env", strings.SplitN(kv, "=", 2)[0])
		}
	}
	argv = append(append(argv, "--"), p.Command...)
	rc.Run = argv
	// The receipt is on disk before the turn starts: a driver killed
	// from here on finds it and never runs this turn again.
	if err := rc.save(d.cfg.Runs); err != nil {
		return rc, nil, nil, err
	}
	d.reach(FailReceipt, p.ID)
	return rc, argv, env, nil
}

func writeFiles(dir string, dirMode, fileMode os.FileMode, files map[string]string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), fileMode); err != nil {
			return err
		}
	}
	return nil
}

// baseEnv are the variables of the driver's environment every command
// gets; the participant's env names add to them. Nothing else passes:
// an agent does not get the coordinator's secrets by default.
var baseEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ"}

// turnEnv is the environment of the turn's acpfs run, which passes it
// on to the command.
func (d *driver) turnEnv(p *Participant, rc *Receipt, inputs, next, lastErr string) []string {
	var env []string
	for _, name := range append(slices.Clone(baseEnv), p.Env...) {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	if _, ok := os.LookupEnv("PATH"); !ok {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
	}
	return append(env,
		"ACPFS_PARTICIPANT="+p.ID,
		"ACPFS_GRANT="+rc.Grant,
		"ACPFS_FOLDER="+d.cfg.Folder,
		"ACPFS_DRIVE_DIR="+filepath.Dir(d.cfg.Path),
		"ACPFS_TURN="+rc.ID,
		"ACPFS_ATTEMPT="+strconv.Itoa(rc.Attempt),
		"ACPFS_WAKE_SEQ="+strconv.Itoa(rc.Wake),
		"ACPFS_TURN_DIR="+inputs,
		"ACPFS_PROMPT_FILE="+filepath.Join(inputs, "prompt.md"),
		"ACPFS_NEXT_ACTION_FILE="+filepath.Join(inputs, "next-action"),
		"ACPFS_LAST_ERROR_FILE="+filepath.Join(inputs, "last-error"),
		"ACPFS_NEXT_ACTION="+next,
		"ACPFS_LAST_ERROR="+lastErr,
	)
}

// runTakesEnv reports whether this acpfs run has --env (it passes the
// environment through otherwise, and the driver builds that environment
// itself).
func (d *driver) runTakesEnv() bool {
	return d.runEnv
}

// runTurn runs the turn's acpfs run and reports on d.done. The thread
// that starts it stays locked until it exits: the parent-death signal
// (SIGKILL) follows the thread, and a killed driver must take its
// sandboxes with it.
func (d *driver) runTurn(t *turn, argv, env []string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := exec.Command(d.opts.Self, argv...)
	c.Env, c.Dir = env, d.cfg.Folder
	// Its own process group: a Ctrl-C reaches the driver alone, which
	// stops the turns itself.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	logf, err := os.OpenFile(filepath.Join(d.cfg.Runs, TurnsDir, t.rc.ID+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.err, t.exit = err, -1
		t.started <- err
		d.done <- t
		return
	}
	defer logf.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.err, t.exit = err, -1
		t.started <- err
		d.done <- t
		return
	}
	c.Stdout, c.Stderr = outW, outW
	err = c.Start()
	outW.Close()
	if err != nil {
		outR.Close()
		t.err, t.exit = err, -1
		t.started <- err
		d.done <- t
		return
	}
	t.proc = c.Process
	t.started <- nil
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		show := func(typ, text string) { d.out.note(Note{Type: typ, Participant: t.p.ID, Turn: t.rc.ID, Text: text}) }
		o := newTurnOutput(d.opts.Output, logf, show)
		t.output = o.drain(outR)
		t.limit = o.limit
		if o.logErr != nil {
			d.out.notef(NoteInfo, t.p.ID, t.rc.ID, "the log of turn %s is incomplete: %v", t.rc.ID, o.logErr)
		}
	}()
	werr := c.Wait()
	// Read to its end (the sandbox and all it started are gone) before
	// the pipe is closed: a writer never meets a closed pipe.
	<-copied
	outR.Close()
	t.exit, t.err = mount.ExitStatus(werr)
	if t.err != nil {
		t.exit = -1
	}
	d.done <- t
}

// stopTurn asks a turn's sandbox to stop (SIGTERM, passed on to the
// command by acpfs run), then kills it after the grace period.
func (d *driver) stopTurn(t *turn, timeout bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.proc == nil || t.killer != nil {
		return
	}
	if timeout {
		t.timedOut = true
		d.out.notef(NoteRefusal, t.p.ID, t.rc.ID, "%s: turn %s ran past its timeout (%s): stopping it", t.p.ID, t.rc.ID, t.p.Timeout)
	} else {
		t.stopped = true
	}
	_ = t.proc.Signal(syscall.SIGTERM)
	t.killer = time.AfterFunc(d.opts.Grace, func() { _ = t.proc.Kill() })
}

func (d *driver) stopAll() {
	for _, t := range d.running {
		d.stopTurn(t, false)
	}
}

// runExitLimit is acpfs run's exit status after the command ran into a
// limit.
const runExitLimit = 6

// limitLine is how acpfs run names the limits a command ran into.
// Compiled at first use, as the patterns of config.go.
var limitLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`ran into its (.+?) limit`) })

// finish closes a turn: its receipt, its turn record, and what the next
// attempt will be told.
func (d *driver) finish(t *turn) {
	timedOut, stopped := t.end()
	delete(d.running, t.p.ID)
	d.out.update(func(st *status) {
		st.running = slices.DeleteFunc(st.running, func(s string) bool { return s == t.p.ID })
	})
	rc := t.rc
	if rc.Inputs != "" {
		_ = os.RemoveAll(rc.Inputs)
	}
	rc.End, rc.Exit, rc.State = now(), t.exit, StateDone
	if t.exit > 128 {
		rc.Signal = unix.SignalName(syscall.Signal(t.exit - 128))
	}
	// acpfs run exits 6 after a limit and names it on its stderr, which
	// it shares with the command: the line counts only with that status.
	if m := limitLine().FindStringSubmatch(t.limit); m != nil && t.exit == runExitLimit {
		rc.Limits = strings.Split(m[1], " and ")
	}
	if timedOut {
		rc.Limits = append(rc.Limits, "timeout")
	}
	if err := d.scan.update(); err != nil {
		slog.Warn("read the ledger", "err", err)
	}
	d.scan.fill(rc, rc.End)
	evs, err := eventsFrom(d.cfg.Folder, rc.Participant, rc.Wake)
	if err != nil {
		slog.Warn("read the history", "err", err)
	}
	rc.Events = append([]EventRef{}, evs...)
	if t.proc != nil {
		rc.Output = &t.output
	}
	setOutcome(rc, t.err, timedOut, stopped)
	d.noteRefusals(rc)
	rc.LastError = lastErrorOf(rc, t.p.Timeout, t.err)
	d.countFailure(rc, t.p.Retries)
	d.lastError[rc.Participant] = rc.LastError
	if err := d.recordTurn(rc); err != nil {
		d.out.notef(NoteInfo, rc.Participant, rc.ID, "%v", err)
	}
	d.reach(FailRecorded, rc.Participant)
	if err := rc.save(d.cfg.Runs); err != nil {
		d.out.notef(NoteInfo, rc.Participant, rc.ID, "%v", err)
	}
	d.reach(FailEnded, rc.Participant)
	evText := make([]string, len(rc.Events))
	for i, e := range rc.Events {
		evText[i] = fmt.Sprintf("%d %s", e.Seq, e.Type)
	}
	out := ""
	if o := rc.Output; o != nil && o.Cut {
		out = fmt.Sprintf("; output %d bytes, %d of them left out of its log", o.Bytes, o.LeftOut)
	}
	d.out.notef(NoteTurnEnded, rc.Participant, rc.ID, "turn %s ended: %s, exit %d, appended [%s], %d read(s), %d write(s), %d refusal(s)%s",
		rc.ID, rc.Outcome, rc.Exit, strings.Join(evText, ", "), len(rc.Reads), len(rc.Writes), len(rc.Refusals), out)
}

// maxRefusalNotes bounds the refusals of one turn the progress shows:
// an agent can be refused as often as it tries, and the receipt lists
// them all.
const maxRefusalNotes = 20

// noteRefusals shows the turn's refusals, up to maxRefusalNotes, and the
// last one in the live block.
func (d *driver) noteRefusals(rc *Receipt) {
	for i, f := range rc.Refusals {
		if i == maxRefusalNotes {
			d.out.notef(NoteRefusal, rc.Participant, rc.ID, "%s was refused %d more time(s): its receipt lists them", rc.Participant, len(rc.Refusals)-i)
			break
		}
		d.out.notef(NoteRefusal, rc.Participant, rc.ID, "%s refused: %s", rc.Participant, f)
	}
	if n := len(rc.Refusals); n > 0 {
		s := rc.Refusals[n-1].String()
		d.out.update(func(st *status) { st.lastRefusal = rc.Participant + ": " + s })
	}
}

// end stops the turn's timers for good and says whether it timed out or
// was stopped.
func (t *turn) end() (timedOut, stopped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.killer != nil {
		t.killer.Stop()
	}
	t.killer = &time.Timer{} // no stop after the end
	return t.timedOut, t.stopped
}

// setOutcome says how the turn of rc ended: an accepted event counts
// before a timeout or a stop, a failure to run before everything.
func setOutcome(rc *Receipt, runErr error, timedOut, stopped bool) {
	switch {
	case runErr != nil:
		rc.Outcome, rc.Note = OutcomeFailed, runErr.Error()
	case len(rc.Events) > 0:
		rc.Outcome = OutcomeAppended
	case timedOut:
		rc.Outcome = OutcomeTimeout
	case stopped:
		rc.Outcome = OutcomeInterrupted
	default:
		rc.Outcome = OutcomeNothing
	}
}

// countFailure counts a turn without an accepted event against its
// participant's retries (an accepted one starts the count again) and
// says when another attempt follows.
func (d *driver) countFailure(rc *Receipt, retries int) {
	if len(rc.Events) > 0 {
		d.failures[rc.Participant] = 0
		return
	}
	d.failures[rc.Participant]++
	if d.failures[rc.Participant] <= retries {
		d.out.notef(NoteRetry, rc.Participant, rc.ID, "%s appended no accepted event (%s): retry %d of %d, told why", rc.Participant, rc.LastError, d.failures[rc.Participant], retries)
	}
}

// lastErrorOf is what the next attempt is told about this one: nothing
// when it appended an accepted event (it counts, and the next turn is a
// first attempt), else the last refusal its own view told it (as
// .acpfs/last-error did), else why it ended. A hidden name's refusal is never told: the agent saw the name
// as missing, and must not learn otherwise from its next prompt.
func lastErrorOf(rc *Receipt, timeout time.Duration, runErr error) string {
	told := slices.DeleteFunc(slices.Clone(rc.Refusals), func(r Refusal) bool { return !r.Told() })
	switch {
	case len(rc.Events) > 0:
		// The turn counts: no next attempt is told anything of it.
		return ""
	case len(told) > 0:
		return told[len(told)-1].String()
	case slices.Contains(rc.Limits, "timeout"):
		return fmt.Sprintf("the turn ran past its timeout (%s) and was stopped", timeout)
	case runErr != nil:
		return "the turn could not run: " + runErr.Error()
	case len(rc.Limits) > 0:
		return "the command ran into its " + strings.Join(rc.Limits, " and ") + " limit"
	case rc.Exit != 0:
		return fmt.Sprintf("the command exited with status %d without appending an accepted event", rc.Exit)
	}
	return "the command exited without appending an accepted event to events.jsonl"
}

// audit runs acpfs audit on the run directory: Markdown and HTML in
// the run directory; it returns the verdict and the Markdown's path.
func (d *driver) audit() (string, string) {
	md := filepath.Join(d.cfg.Runs, "audit.md")
	html := filepath.Join(d.cfg.Runs, "audit.html")
	for _, f := range []struct{ format, out string }{{"md", md}, {"html", html}} {
		if _, err := d.acpfs("audit", "--runs", d.cfg.Runs, "--folder", d.cfg.Folder, "--format", f.format, "--out", f.out); err != nil {
			// audit exits non-zero for a violated or unverified verdict
			// and still writes the report.
			if _, serr := os.Stat(f.out); serr != nil {
				d.out.notef(NoteAudit, "", "", "audit failed: %v", err)
				return "", ""
			}
		}
	}
	out, _ := d.acpfs("audit", "--runs", d.cfg.Runs, "--format", "json")
	var rep struct {
		Verdict string `json:"verdict"`
	}
	_ = json.Unmarshal([]byte(out), &rep)
	d.out.notef(NoteAudit, "", "", "audit: %s (%s, %s)", rep.Verdict, md, html)
	return rep.Verdict, md
}
