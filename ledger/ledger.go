// Package ledger writes and checks the communication ledger: one JSON
// record per line, each carrying the SHA-256 of its predecessor, sealed by
// the writers and signed at checkpoints, so that an edited, removed,
// reordered, inserted, truncated or forged record is detected.
//
// # Record format and chain rule
//
// Each line is the canonical encoding of a [Record] followed by "\n". The
// canonical encoding is the compact JSON object with the fields in the order
// they are declared in Record (seq, at, kind, agent, grant, path, op, pid,
// sha256, count, first, last, detail, key, mac, sig, prev, hash), the
// optional fields left out when empty, no insignificant whitespace, and
// strings escaped as Go's encoding/json does with HTML escaping turned off
// (so "<", ">" and "&" stay literal, while control characters, U+2028 and
// U+2029 are written as \uXXXX). Strings are valid UTF-8: the writer
// replaces invalid bytes.
//
// Hash is the lowercase hex SHA-256 of the line's canonical encoding with
// the hash value replaced by the empty string, that is of the bytes of the
// line up to its final `"hash":"` followed by `"}` (without the newline).
// Prev is the Hash of the previous line, and the empty string for the first
// record. Seq starts at 1 and grows by exactly 1 per line, across
// segments.
//
// That is format versions 1 and 2. Version 3 (v3.go), in which new files
// are written, keeps the rule but stores prev, hash and key on signed
// records only, a shorter batch seal, and agent, grant and pid only where
// they change: every reader puts them back.
//
// # Seals and signatures
//
// Writers hold a [Key] kept in the ledger's directory (keys.go). The last
// record of every batch carries a MAC, so that the next writer can tell the
// tail was written by a writer; checkpoints, segment boundaries and gaps
// carry an Ed25519 signature over the record, whose prev covers the whole
// chain before it. A reviewer holding only the public key checks every
// signature and cannot make one (verify.go). docs/ledger.md is the
// user-facing description.
//
// # Concurrency, tampering and crash safety
//
// Writers hold an exclusive flock on the ledger while they read its tail
// and append, so several processes (mounts, the CLI) may share one file.
// Before each batch a writer checks that the file is still the chain it
// wrote (guard.go) and stops, refusing every later Append with [ErrBroken],
// when it is not. Each batch is one write(2) of whole lines, so a crash can
// only leave a torn last line without its newline; the next writer cuts it
// and records a KindRepair record (bytes cut, their SHA-256). Complete
// records are never rewritten; [Repair] is the operator's way back.
package ledger

import (
	"fmt"
	"strings"
	"time"
)

// This file is the contract between ledger/ and its users (the CLI, fs/,
// mount/). Signatures here are stable; bodies are filled in by the ledger
// implementation.

// Kind says what a record records. The values are the strings stored in
// users' ledgers: a kind is never renamed, only added.
type Kind string

// Record kinds.
const (
	KindGrantCreated    Kind = "grant_created"
	KindGrantRevoked    Kind = "grant_revoked"
	KindHandoffRecorded Kind = "handoff_recorded"
	KindMountStarted    Kind = "mount_started"
	KindMountStopped    Kind = "mount_stopped"
	KindRead            Kind = "read"
	KindReadRequest     Kind = "read_request" // --audit reads: one per read(2)
	KindList            Kind = "list"
	KindDenied          Kind = "denied"
	KindWrite           Kind = "write"
	KindAppendAccepted  Kind = "append_accepted"
	KindAppendRejected  Kind = "append_rejected"
	KindFrozenRefused   Kind = "frozen_refused"
	KindPanic           Kind = "panic"
	KindRepair          Kind = "repair"

	KindReadRepeat       Kind = "read_repeat"      // repeats of a read already recorded in full, aggregated per path (written by acpfs before reads_repeated)
	KindReadsRepeated    Kind = "reads_repeated"   // a view's repeated reads of contents already recorded in full, one count per interval (Detail: "N files")
	KindReadHash         Kind = "read_hash"        // the content hash of an earlier read recorded without one (Detail: "read seq N")
	KindDeniedRepeat     Kind = "denied_repeat"    // repeats of a refusal already recorded in full, aggregated
	KindWriteRepeat      Kind = "write_repeat"     // repeats of a no-op change (open for writing, times only) already recorded in full, aggregated
	KindAppendRecovered  Kind = "append_recovered" // an appended line found at start-up without its record
	KindAppendFailed     Kind = "append_failed"    // an accepted and recorded append whose write then failed
	KindGrantApplied     Kind = "grant_applied"    // a view applied a grant (SHA256: grants.Grant.Hash)
	KindSignedCheckpoint Kind = "checkpoint"       // a signed checkpoint over the chain
	KindGap              Kind = "gap"              // an operator's acknowledgement of lost records
	KindSegmentEnd       Kind = "segment_end"      // the last record of a sealed segment
	KindSegmentStart     Kind = "segment_start"    // the first record of a new segment
	KindLedgerRecovered  Kind = "ledger_recovered" // a writer resumed after an operator restored the ledger
	KindTurn             Kind = "turn"             // acpfs drive: one participant's turn ended (Detail: a Turn, as JSON)

	// The coordinator (`acpfs up`): a view that went away without being
	// stopped by it (unmounted from outside, its connection aborted, its
	// mountpoint no longer its mount), and the same view mounted again.
	KindViewLost      Kind = "view_lost"
	KindViewRemounted Kind = "view_remounted"
	// KindViewRemountFailed is a lost view that could not be mounted
	// again in its first attempts (Detail: how many, the last error,
	// when it is tried again): it is retried, further and further apart.
	KindViewRemountFailed Kind = "view_remount_failed"
	// KindGrantRefused is a grant acpfs up refused (Detail says why):
	// its agent has no view; the others' are served.
	KindGrantRefused Kind = "grant_refused"

	// Several hosts: what a host's document sync did (see store.DocsOptions).
	KindDocConflict Kind = "doc_conflict"  // two hosts wrote one file from one revision: both versions kept
	KindDocRefused  Kind = "doc_refused"   // a document from the store was refused (bad path, header, hash)
	KindDocTooLarge Kind = "doc_too_large" // a file too large for the store stays on its host

	// acpfs run --net allow=: a connection of the command through the
	// egress proxy (Op: connect, http or socks5; Detail: host:port and
	// the addresses, or why it was refused), or with Count the repeats of
	// one already recorded in full (First, Last).
	KindNetAllowed Kind = "net_allowed"
	KindNetRefused Kind = "net_refused"
)

// Record is one ledger line. Seq, At, Prev and Hash are set by the Writer.
type Record struct {
	Seq int64 `json:"seq"`
	// Version is the ledger format of the file the record starts: set on
	// the first record of every file (seq 1, and each segment_start) and
	// on no other. A file whose first record carries none is version 1,
	// the format before versions were recorded. See CurrentVersion.
	Version int64  `json:"version,omitempty"`
	At      string `json:"at"` // RFC 3339 UTC with nanoseconds
	Kind    Kind   `json:"kind"`
	Agent   string `json:"agent,omitempty"`
	Grant   string `json:"grant,omitempty"`
	Path    string `json:"path,omitempty"` // folder-relative, slash-separated
	Op      Op     `json:"op,omitempty"`   // see Op
	PID     uint32 `json:"pid,omitempty"`
	SHA256  string `json:"sha256,omitempty"` // content hash for reads, handoffs
	Count   int64  `json:"count,omitempty"`  // read_repeat, reads_repeated, denied_repeat, write_repeat (and net_allowed, net_refused when set): how many repeats; gap: records lost
	// First and Last bound the repeats a read_repeat, reads_repeated,
	// denied_repeat or write_repeat record counts (same layout as At).
	First  string `json:"first,omitempty"`
	Last   string `json:"last,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Key names the signing key (KeyID) of a record that carries Sig, and
	// in files of versions 1 and 2 of one that carries MAC.
	Key string `json:"key,omitempty"`
	// MAC authenticates the last record of every batch to the other
	// writers sharing the ledger (HMAC-SHA256 under a key derived from
	// the signing key; 128 bits of it in version 3), so that a writer
	// never continues a chain that someone without the key appended to.
	MAC string `json:"mac,omitempty"`
	// Sig is the Ed25519 signature of a checkpoint (and of segment and
	// gap records); it covers the whole chain up to the record. Anyone
	// holding the public key can check it; only a writer can make one.
	Sig  string `json:"sig,omitempty"`
	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// SyncMode says when the writer calls fsync.
type SyncMode int

const (
	SyncBatch  SyncMode = iota // records are written before Append returns; fsync is batched
	SyncAlways                 // fsync before Append returns
	SyncOff                    // never fsync (the kernel decides)
)

// ParseSyncMode parses "always", "batch" or "off".
func ParseSyncMode(s string) (SyncMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "batch", "":
		return SyncBatch, nil
	case "always":
		return SyncAlways, nil
	case "off":
		return SyncOff, nil
	}
	return SyncBatch, fmt.Errorf("unknown sync mode %q (want always, batch or off)", s)
}

// String returns the name ParseSyncMode accepts.
func (m SyncMode) String() string {
	switch m {
	case SyncBatch:
		return "batch"
	case SyncAlways:
		return "always"
	case SyncOff:
		return "off"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// Options configures a Writer.
type Options struct {
	Sync SyncMode

	// BatchInterval bounds how long a written record may wait for its
	// fsync in SyncBatch mode (default 5ms).
	BatchInterval time.Duration
	// BatchRecords triggers an early batched fsync once that many records
	// are waiting (default 256).
	BatchRecords int
	// Clock stamps records (default time.Now); tests set it.
	Clock func() time.Time

	// Key seals records. The default is the key kept in the ledger's
	// directory (KeyFile), created on first use.
	Key *Key
	// SignEvery adds a signed checkpoint once that many records are
	// not yet covered by a signature (default 1024).
	SignEvery int
	// SignAfter bounds how long a record waits for a signature when the
	// ledger goes quiet (default 1s).
	SignAfter time.Duration
	// SegmentBytes seals the ledger's file once it is that large and
	// continues in a new one (default 128 MiB); see SegmentName.
	SegmentBytes int64

	// version is the format of the files the writer starts (default
	// CurrentVersion); tests write older ones. A file the writer finds is
	// continued in its own format.
	version int64
}

// Writer appends records. It is safe for concurrent use by goroutines and,
// through an flock on the file, by several processes.
//
// Concurrent Appends are grouped: one goroutine writes everything queued
// with a single flock, write(2) and (in SyncAlways) fsync while the others
// wait. The implementation is in writer.go.
type Writer struct {
	writerState
}

// Open opens (creating if needed) the ledger at path for appending. If the
// file ends with a torn line (a crash in the middle of a write), Open cuts
// it off and appends a KindRepair record describing what was cut. It fails
// when the last complete line is not a ledger record.
func Open(path string, opts Options) (*Writer, error) { return open(path, opts) }

// Append fills in Seq, At, Prev and Hash, writes the record, and returns
// it (sealed: with its Key and MAC or Sig, as the file's version writes
// them). The record is in the file before Append returns.
func (w *Writer) Append(r Record) (Record, error) { return w.append(r) }

// Sync flushes pending batched fsyncs: every record whose Append has
// returned is durable when Sync returns (in every mode, SyncOff included,
// since the caller asked).
func (w *Writer) Sync() error { return w.sync() }

// Close waits for queued Appends, syncs (unless SyncOff) and closes the
// ledger. Append after Close returns ErrClosed.
func (w *Writer) Close() error { return w.close() }

// Broken returns why the writer stopped, or nil while it is writing. A
// broken writer refuses every Append (the error wraps ErrBroken) until
// the ledger is repaired; see BrokenFile.
func (w *Writer) Broken() *Broken { return w.broken.Load() }

// Resume reports whether the writer is writing, first trying to leave
// the broken state: it does when an operator has repaired the ledger
// (see Repair). Cheap while the writer is sound.
func (w *Writer) Resume() bool { return w.tryResume() }

// Failing reports whether the last write failed and the file still looks
// unwritable (its filesystem nearly full, or the file immutable or
// append-only). A view then refuses everything alike, so that its answers
// do not tell hidden names from absent ones while their probes cannot be
// recorded; once the file looks writable again, operations go through
// and the next write decides.
func (w *Writer) Failing() bool { return w.failing.Load() && !w.looksWritable() }

// Path returns the ledger file's path as given to Open.
func (w *Writer) Path() string { return w.path }
