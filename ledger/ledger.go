// Package ledger writes and checks the hash-chained communication ledger:
// one JSON record per line, each carrying the SHA-256 of its predecessor,
// so that an edited, removed, reordered or inserted record is detected.
package ledger

// This file is the contract between ledger/ and its users (the CLI, fs/,
// mount/). Signatures here are stable; bodies are filled in by the ledger
// implementation.

// Record kinds.
const (
	KindGrantCreated    = "grant_created"
	KindGrantRevoked    = "grant_revoked"
	KindHandoffRecorded = "handoff_recorded"
	KindMountStarted    = "mount_started"
	KindMountStopped    = "mount_stopped"
	KindRead            = "read"
	KindReadRequest     = "read_request" // --audit reads: one per read(2)
	KindList            = "list"
	KindDenied          = "denied"
	KindWrite           = "write"
	KindAppendAccepted  = "append_accepted"
	KindAppendRejected  = "append_rejected"
	KindFrozenRefused   = "frozen_refused"
	KindPanic           = "panic"
	KindRepair          = "repair"
)

// Record is one ledger line. Seq, At, Prev and Hash are set by the Writer.
type Record struct {
	Seq    int64  `json:"seq"`
	At     string `json:"at"` // RFC 3339 UTC with nanoseconds
	Kind   string `json:"kind"`
	Agent  string `json:"agent,omitempty"`
	Grant  string `json:"grant,omitempty"`
	Path   string `json:"path,omitempty"` // folder-relative, slash-separated
	Op     string `json:"op,omitempty"`   // lookup, open, readdir, write, rename, ...
	PID    uint32 `json:"pid,omitempty"`
	SHA256 string `json:"sha256,omitempty"` // content hash for reads, handoffs
	Detail string `json:"detail,omitempty"`
	Prev   string `json:"prev"`
	Hash   string `json:"hash"`
}

// SyncMode says when the writer calls fsync.
type SyncMode int

const (
	SyncBatch  SyncMode = iota // records are written before Append returns; fsync is batched
	SyncAlways                 // fsync before Append returns
	SyncOff                    // never fsync (the kernel decides)
)

// ParseSyncMode parses "always", "batch" or "off".
func ParseSyncMode(s string) (SyncMode, error) { panic("unimplemented") }

// Options configures a Writer.
type Options struct {
	Sync SyncMode
}

// Writer appends records. It is safe for concurrent use by goroutines and,
// through an flock on the file, by several processes.
type Writer struct {
	// filled in by the implementation
}

// Open opens (creating if needed) the ledger at path for appending.
func Open(path string, opts Options) (*Writer, error) { panic("unimplemented") }

// Append fills in Seq, At, Prev and Hash, writes the record, and returns
// it. The record is in the file before Append returns.
func (w *Writer) Append(r Record) (Record, error) { panic("unimplemented") }

// Sync flushes pending batched fsyncs.
func (w *Writer) Sync() error { panic("unimplemented") }

// Close syncs and closes the ledger.
func (w *Writer) Close() error { panic("unimplemented") }
