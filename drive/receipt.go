package drive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// TurnsDir is where the receipts are, in the run directory.
const TurnsDir = "turns"

// Turn states of a receipt.
const (
	StateRunning = "running" // written before the turn starts
	StateDone    = "done"
)

// Turn outcomes.
const (
	OutcomeAppended    = "appended"
	OutcomeNothing     = "nothing_appended"
	OutcomeTimeout     = "timeout"
	OutcomeInterrupted = "interrupted"
	OutcomeFailed      = "failed" // acpfs run could not start the sandbox
)

// Receipt is everything a turn did, as RUNS/turns/<id>.json says it.
// It is written before the turn starts (State running), so that a
// driver killed at any moment and started again knows the turn ran and
// never runs it again.
type Receipt struct {
	ID           string     `json:"id"`
	Participant  string     `json:"participant"`
	Grant        string     `json:"grant"`
	GrantSHA256  string     `json:"grant_sha256"`
	PromptSHA256 string     `json:"prompt_sha256"`
	Wake         int        `json:"wake"` // the seq that woke the turn
	Attempt      int        `json:"attempt"`
	Command      []string   `json:"command"`
	Run          []string   `json:"run"`              // the acpfs run arguments
	Inputs       string     `json:"inputs,omitempty"` // the directory shown read-only to the command, removed after
	State        string     `json:"state"`
	Start        string     `json:"start"`
	End          string     `json:"end,omitempty"`
	Exit         int        `json:"exit"`
	Signal       string     `json:"signal,omitempty"`
	Outcome      string     `json:"outcome,omitempty"`
	Events       []EventRef `json:"events"`
	Reads        []string   `json:"reads"`
	Writes       []string   `json:"writes"`
	Refusals     []Refusal  `json:"refusals"`
	Limits       []string   `json:"limits,omitempty"`
	// Output is how much the turn printed and how much of it its log
	// (RUNS/turns/<id>.log) left out; nil for a turn that never ran.
	Output    *Output `json:"output,omitempty"`
	LastError string  `json:"last_error,omitempty"` // what the next attempt is told
	LedgerSeq int64   `json:"ledger_seq,omitempty"` // the turn record, once written
	Note      string  `json:"note,omitempty"`
}

// EventRef is one event a turn appended.
type EventRef struct {
	Seq  int    `json:"seq"`
	Type string `json:"type"`
}

// Refusal is one refusal the ledger recorded during a turn.
type Refusal struct {
	Seq    int64       `json:"ledger_seq"`
	Kind   ledger.Kind `json:"kind"`
	Op     ledger.Op   `json:"op,omitempty"`
	Path   string      `json:"path,omitempty"`
	Detail string      `json:"detail,omitempty"`
}

// String is the refusal as the driver prints it and hands it to the
// next attempt, with what it means.
func (r Refusal) String() string {
	what := string(r.Op)
	if r.Path != "" {
		what += " " + r.Path
	}
	return fmt.Sprintf("%s: %s (%s: %s)", what, r.Detail, r.Kind, explainKind(r.Kind))
}

// explainKind says what a refusal kind means, for a person reading the
// progress lines.
func explainKind(kind ledger.Kind) string {
	switch kind {
	case ledger.KindDenied, ledger.KindDeniedRepeat:
		return "the grant does not show or allow this path; the agent saw it as missing or read-only"
	case ledger.KindAppendRejected:
		return "the line was not appended to events.jsonl: the protocol or the grant refuses it"
	case ledger.KindFrozenRefused:
		return "the deliverable is frozen: after deliverable_frozen nothing may change it"
	}
	return "refused"
}

// record is the ledger summary of the receipt.
func (r *Receipt) record(runs string) ledger.Record {
	t := ledger.Turn{
		ID: r.ID, Wake: r.Wake, Attempt: r.Attempt, Participant: r.Participant, PromptSHA: r.PromptSHA256,
		Start: r.Start, End: r.End, Exit: r.Exit, Signal: r.Signal, Outcome: r.Outcome,
		Reads: r.Reads, Writes: r.Writes, Limits: r.Limits,
		File: filepath.Join(TurnsDir, r.ID+".json"),
	}
	for _, e := range r.Events {
		t.Events = append(t.Events, fmt.Sprintf("%d %s", e.Seq, e.Type))
	}
	for _, f := range r.Refusals {
		t.Refusals = append(t.Refusals, strings.TrimSpace(string(f.Op)+" "+f.Path)+": "+string(f.Kind))
	}
	return ledger.TurnRecord(r.Participant, r.Grant, r.GrantSHA256, t)
}

func receiptPath(runs, id string) string { return filepath.Join(runs, TurnsDir, id+".json") }

// save writes the receipt atomically and durably.
func (r *Receipt) save(runs string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(receiptPath(runs, r.ID), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write receipt %s: %w", r.ID, err)
	}
	return nil
}

// loadReceipts reads every receipt of the run directory, oldest first.
func loadReceipts(runs string) ([]*Receipt, error) {
	ents, err := os.ReadDir(filepath.Join(runs, TurnsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Receipt
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(runs, TurnsDir, e.Name()))
		if err != nil {
			return nil, err
		}
		var r Receipt
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("receipt %s: %w", e.Name(), err)
		}
		out = append(out, &r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

// Failures are, per participant, its last turns in a row that appended
// nothing: what a resumed driver counts its retries from.
func Failures(rs []*Receipt) map[string]int {
	f := map[string]int{}
	for _, r := range rs {
		if len(r.Events) > 0 {
			f[r.Participant] = 0
		} else {
			f[r.Participant]++
		}
	}
	return f
}

// ledgerScan follows the ledger's complete lines from where it last
// stopped, keeping the records a turn receipt needs.
type ledgerScan struct {
	path    string
	offset  int64
	dec     *ledger.LineDecoder // the lines before offset read; a version 3 line leaves out what they say
	byGrant map[string][]ledger.Record
	turns   map[string]recordedTurn // turn id -> its turn record
}

// recordedTurn is a turn record found in the ledger.
type recordedTurn struct {
	seq  int64
	turn ledger.Turn
}

func newLedgerScan(path string) *ledgerScan {
	return &ledgerScan{path: path, dec: ledger.NewLineDecoder(), byGrant: map[string][]ledger.Record{}, turns: map[string]recordedTurn{}}
}

// kept are the kinds a receipt reports.
var kept = map[ledger.Kind]bool{
	ledger.KindRead: true, ledger.KindReadRepeat: true, ledger.KindWrite: true, ledger.KindWriteRepeat: true,
	ledger.KindAppendAccepted: true, ledger.KindDenied: true, ledger.KindDeniedRepeat: true,
	ledger.KindFrozenRefused: true, ledger.KindAppendRejected: true,
}

// update reads the records appended since the last call.
func (s *ledgerScan) update() error {
	f, err := os.Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(s.offset, io.SeekStart); err != nil {
		return err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return nil // EOF, or a line still being written: next time
		}
		s.offset += int64(len(line))
		r, err := s.dec.Decode(line[:len(line)-1])
		if err != nil {
			continue
		}
		switch {
		case r.Kind == ledger.KindTurn:
			if t, err := ledger.ParseTurn(r); err == nil {
				s.turns[t.ID] = recordedTurn{seq: r.Seq, turn: t}
			}
		case kept[r.Kind] && r.Grant != "":
			s.byGrant[r.Grant] = append(s.byGrant[r.Grant], r)
		}
	}
}

// fill sets what the ledger says of the receipt's turn: the records of
// its grant from its start on (and up to end, when set).
func (s *ledgerScan) fill(rc *Receipt, end string) {
	reads, writes := map[string]bool{}, map[string]bool{}
	rc.Reads, rc.Writes, rc.Refusals = []string{}, []string{}, []Refusal{}
	for _, r := range s.byGrant[rc.Grant] {
		if r.At < rc.Start || end != "" && r.At > end {
			continue
		}
		switch r.Kind {
		case ledger.KindRead, ledger.KindReadRepeat:
			if !reads[r.Path] {
				reads[r.Path] = true
				rc.Reads = append(rc.Reads, r.Path)
			}
		case ledger.KindWrite, ledger.KindWriteRepeat, ledger.KindAppendAccepted:
			if !writes[r.Path] {
				writes[r.Path] = true
				rc.Writes = append(rc.Writes, r.Path)
			}
		case ledger.KindDenied, ledger.KindDeniedRepeat, ledger.KindAppendRejected, ledger.KindFrozenRefused, ledger.KindNetRefused:
			rc.Refusals = append(rc.Refusals, Refusal{Seq: r.Seq, Kind: r.Kind, Op: r.Op, Path: r.Path, Detail: r.Detail})
		}
	}
}

// Told reports whether the agent itself was told of the refusal: its
// view answers a name the grant hides (a lookup refused) as if it did
// not exist, leaving .acpfs/last-error alone so that the agent does not
// learn the name is there. Such a refusal is for the coordinator only.
func (r Refusal) Told() bool {
	return r.Op != ledger.OpLookup
}

// maxHistory bounds the events.jsonl the driver reads for a receipt.
const maxHistory = 1 << 30

// eventsFrom returns the events of participant after seq, from the
// folder's events.jsonl. The folder is reached as every daemon reaches
// it (safeio: no symlink followed, a regular file only): whoever can
// write it must not make the driver read elsewhere or block on a FIFO.
func eventsFrom(folder, participant string, after int) ([]EventRef, error) {
	root, err := safeio.OpenRoot(folder)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	data, _, err := root.ReadFile(protocol.EventsFile, maxHistory)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", protocol.EventsFile, err)
	}
	out := []EventRef{}
	for _, line := range bytes.Split(data, []byte("\n")) {
		var ev protocol.Event
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		if ev.Seq > after && ev.From == participant {
			out = append(out, EventRef{Seq: ev.Seq, Type: ev.Event})
		}
	}
	return out, nil
}
