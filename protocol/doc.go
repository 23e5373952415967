// Package protocol implements ACP schema v2, the Agent Collaboration
// Protocol: the event log and its state machine, the document rules, the
// folder validator, the next-action advice and the initialization of a
// collaboration folder. It knows nothing about FUSE.
//
// Log is the entry point for writers: it replays events.jsonl once, then
// checks and appends one event at a time in constant time, under a
// cross-process lock, and keeps protocol.json in line with the derived
// state. Validate checks a whole folder; Init creates one.
//
// A writer that closes events.jsonl with an unterminated line is judged
// by ClassifyPending: a complete JSON value is appended as if its newline
// were there (Log.AppendPending), a cut-off one is refused.
package protocol
