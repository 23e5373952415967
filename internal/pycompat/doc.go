// Package pycompat reads and writes text and JSON the way the reference
// implementation of ACP does: its scripts are Python, so files acpfs
// writes must be byte-identical to what Python's json module and str
// methods produce, and the document rules must match Python's regular
// expression semantics, or the two tools would disagree on the same
// folder. Nothing here knows about the protocol itself.
package pycompat
