package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

func TestEscapeProtocolForgery(t *testing.T) {
	r := newRun(t)
	c, a, b := r.c, r.alice, r.bob
	require.NoError(t, os.WriteFile(a.path(primary), []byte(designSpec("In Review")), 0o644))
	r.must(a, owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	escPlant(t, c.folder, nil, map[string]string{
		"scratch/fake.jsonl":   c.event(reviewer, "blocked", nil) + "\n",
		"scratch/fake.json":    "{}\n",
		".acpfs/status":        "phase: completed\n", // planted look-alikes of the control files
		".acpfs/planted":       "planted\n",
		"scratch/.acpfs/wait":  "ready\n",
		"scratch/.acpfs/x.txt": "x\n",
	}, nil)
	e := escEnv{c: c, v: a, other: b}
	p := a.path
	drafted := func() string {
		return c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	}
	// edit changes one field of the next valid event.
	edit := func(field string, value any) func() string {
		return func() string {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(drafted()), &m))
			if value == nil {
				delete(m, field)
			} else {
				m[field] = value
			}
			out, err := json.Marshal(m)
			require.NoError(t, err)
			return string(out)
		}
	}
	appendAs := func(v *view, line func() string) func(*testing.T) error {
		return func(*testing.T) error { return escAppend(v, line()) }
	}
	rejected := escRec(ledger.KindAppendRejected, "events.jsonl", "append")
	ctlDenied := func(path, op string) *escRecord { return escRec(ledger.KindDenied, path, op) }
	ctlRO := ".acpfs is read-only"
	protoDenied := func(op string) *escRecord { return escRec(ledger.KindDenied, "protocol.json", op) }
	// The policy's refusals of changes to the protocol files other than
	// through their handles (fs/policy.go, managedChange).
	const (
		cannotRemove  = "protocol files cannot be removed"
		cannotReplace = "protocol files cannot be renamed or replaced"
		maintained    = "protocol files are maintained by acpfs"
	)
	evSetattr := escRecD(ledger.KindAppendRejected, "events.jsonl", "setattr", "events.jsonl is append-only")
	protoSetattr := escRecD(ledger.KindDenied, "protocol.json", "setattr", "protocol.json is maintained by acpfs")
	forgedProtocol := func(mutate func(m map[string]any)) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(c.folder, "protocol.json"))), &m))
		mutate(m)
		out, err := json.MarshalIndent(m, "", "  ")
		require.NoError(t, err)
		return append(out, '\n')
	}

	escRun(t, e, []escAttempt{
		// Forged events.
		{name: "from another participant", do: appendAs(a, func() string { return c.event(reviewer, "blocked", nil) }),
			errno: syscall.EPERM, record: rejected, explain: `from is "bob" but this writer is "alice"`},
		{name: "the reviewer writing as the owner", as: b, do: appendAs(b, drafted), errno: syscall.EPERM,
			record: rejected, explain: `from is "alice" but this writer is "bob"`},
		{name: "from a participant that is not listed",
			do: appendAs(a, func() string { return c.event("mallory", "blocked", nil) }), errno: syscall.EPERM,
			record: rejected, explain: "from-mismatch"},
		{name: "seq gap", do: appendAs(a, func() string { return edit("seq", c.snapshot().LastSeq+5)() }),
			errno: syscall.EPERM, record: rejected, explain: "seq-continuous"},
		{name: "seq replay of initialized",
			do:    appendAs(a, func() string { return strings.SplitN(readFile(t, filepath.Join(c.folder, "events.jsonl")), "\n", 2)[0] }),
			errno: syscall.EPERM, record: rejected, explain: "seq-continuous"},
		{name: "at earlier than the previous event", do: appendAs(a, edit("at", "2001-01-01T00:00:00Z")),
			errno: syscall.EPERM, record: rejected, explain: "at-order"},
		{name: "reply_to naming no earlier event", do: appendAs(a, edit("reply_to", 99)), errno: syscall.EPERM,
			record: rejected, explain: "reply-to-range"},
		{name: "reply_to missing", do: appendAs(a, edit("reply_to", nil)), errno: syscall.EPERM, record: rejected,
			explain: "reply-to-required"},
		// Unknown fields are kept (other ACP tools write them; see "an
		// extra phase field" below); a field given twice is refused: two
		// readers could take different values.
		{name: "a duplicated seq field", do: appendAs(a, func() string {
			return `{"seq":1,` + strings.TrimPrefix(drafted(), "{")
		}), errno: syscall.EINVAL, record: rejected, explain: `field "seq" appears twice`},
		{name: "invalid UTF-8",
			do:    appendAs(a, func() string { return strings.Replace(drafted(), "by alice", "by \xff\xfe", 1) }),
			errno: syscall.EINVAL, record: rejected, explain: "UTF-8"},
		{name: "a raw U+2028 inside the line",
			do:    appendAs(a, func() string { return strings.Replace(drafted(), "by alice", "by\u2028alice", 1) }),
			errno: syscall.EINVAL, record: rejected, explain: "U+2028"},
		{name: "not JSON", do: appendAs(a, func() string { return "phase=completed" }), errno: syscall.EINVAL,
			record: rejected, explain: "not one JSON value"},
		{name: "completed straight from drafting",
			do:    appendAs(a, func() string { return c.event(owner, "completed", map[string]any{"doc": "conclusion.md"}) }),
			errno: syscall.EPERM, record: rejected, explain: "readiness-passed-required"},
		{name: "deliverable_frozen in drafting", do: appendAs(a, func() string {
			return c.event(owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(t, filepath.Join(c.folder, primary))})
		}), errno: syscall.EPERM, record: rejected, explain: "not allowed in phase drafting"},
		{name: "review_submitted out of turn", as: b,
			do: appendAs(b, func() string { return c.event(reviewer, "review_submitted", nil) }), errno: syscall.EPERM,
			record: rejected, explain: "append events.jsonl"},
		{name: "two events, the refused one first", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(c.event(reviewer, "blocked", nil)+"\n"+drafted()+"\n"))
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		// A complete event left without its newline is judged at close
		// like any other line (see "an event without its final newline"
		// below); a cut-off one is refused.
		{name: "an unterminated line at close", do: func(*testing.T) error {
			line := drafted()
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(line[:len(line)-10]))
		}, errno: syscall.EINVAL, record: rejected, explain: "the event was cut off"},
		{name: "an unterminated forged event at close", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(c.event(reviewer, "blocked", nil)))
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		{name: "10 MiB line (the writer must see EINVAL)", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(`{"summary":"`+strings.Repeat("x", 10<<20)+"\"}\n"))
		}, errno: syscall.EINVAL, record: rejected, explain: "line longer than"},
		{name: "10 MiB line from the shell",
			do:    escSh(a, `head -c 10485760 /dev/zero | tr '\0' x | sed 's/^/{"summary":"/; s/$/"}/' >> events.jsonl`),
			errno: syscall.EINVAL, record: rejected, explain: "line longer than"},

		// Overwriting, truncating, replacing events.jsonl.
		{name: "pwrite of the first line at offset 0", do: func(*testing.T) error {
			first := strings.SplitN(readFile(t, filepath.Join(c.folder, "events.jsonl")), "\n", 2)[0]
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte(first+"\n"), 0)
			return err
		}, errno: syscall.EPERM, record: rejected, explain: "seq-continuous"},
		{name: "> events.jsonl", do: escSh(a, ": > events.jsonl"), errno: syscall.EPERM,
			record: escRec(ledger.KindAppendRejected, "events.jsonl", "open"), explain: "O_TRUNC refused"},
		{name: "O_TRUNC open of events.jsonl",
			do:    func(*testing.T) error { return escOpen(p("events.jsonl"), os.O_WRONLY|os.O_TRUNC) },
			errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "open"),
			explain: "O_TRUNC refused"},
		{name: "truncate events.jsonl", do: func(*testing.T) error { return os.Truncate(p("events.jsonl"), 10) },
			errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "chmod events.jsonl", do: func(*testing.T) error { return os.Chmod(p("events.jsonl"), 0o600) },
			errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "utimes events.jsonl",
			do:    func(*testing.T) error { return os.Chtimes(p("events.jsonl"), time.Unix(0, 0), time.Unix(0, 0)) },
			errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "touch events.jsonl (utimes now)", do: escSh(a, "touch events.jsonl"), errno: syscall.EPERM,
			record: evSetattr, explain: "append-only"},
		{name: "chown events.jsonl", do: func(*testing.T) error { return os.Chown(p("events.jsonl"), 65534, 65534) },
			errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "chown events.jsonl to its own owner",
			do:    func(*testing.T) error { return os.Chown(p("events.jsonl"), os.Getuid(), os.Getgid()) },
			errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "ftruncate on an events.jsonl write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Ftruncate(fd, 10)
		}, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "ftruncate to its own size on an events.jsonl write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			return unix.Ftruncate(fd, st.Size)
		}, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "setxattr on events.jsonl",
			do:    func(*testing.T) error { return unix.Setxattr(p("events.jsonl"), "user.x", []byte("1"), 0) },
			errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "setxattr", maintained),
			explain: "setxattr events.jsonl: protocol files are maintained by acpfs"},
		{name: "removexattr on events.jsonl",
			do: func(*testing.T) error { return unix.Removexattr(p("events.jsonl"), "user.x") }, errno: syscall.EPERM,
			record:  escRecD(ledger.KindDenied, "events.jsonl", "removexattr", maintained),
			explain: "maintained by acpfs"},
		{name: "rm events.jsonl", do: escSh(a, "rm -f events.jsonl"), errno: syscall.EPERM,
			record: escRecD(ledger.KindDenied, "events.jsonl", "unlink", cannotRemove), explain: "cannot be removed"},
		{name: "mv events.jsonl away", do: escSh(a, "mv events.jsonl scratch/e.jsonl"), errno: syscall.EPERM,
			record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace), explain: "cannot be renamed"},
		// The refusal names the protocol file, the name being replaced.
		{name: "mv a forged log over events.jsonl",
			do:    func(*testing.T) error { return os.Rename(p("scratch/fake.jsonl"), p("events.jsonl")) },
			errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace),
			explain: "rename events.jsonl: " + cannotReplace},
		{name: "RENAME_NOREPLACE of a forged log onto events.jsonl", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/fake.jsonl"), unix.AT_FDCWD, p("events.jsonl"), unix.RENAME_NOREPLACE)
		}, errno: syscall.EEXIST},
		{name: "RENAME_EXCHANGE of a forged log with events.jsonl", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/fake.jsonl"), unix.AT_FDCWD, p("events.jsonl"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace), explain: cannotReplace},
		{name: "ln events.jsonl to a second name",
			do:    func(*testing.T) error { return os.Link(p("events.jsonl"), p("scratch/ev.jsonl")) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/ev.jsonl", "link"), explain: escNoLinks},
		{name: "ln protocol.json to a second name",
			do:    func(*testing.T) error { return os.Link(p("protocol.json"), p("scratch/p.json")) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/p.json", "link"), explain: escNoLinks},
		{name: "fallocate on an events.jsonl handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 64)
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "fallocate"), explain: "append-only"},
		{name: "copy_file_range of a forged log into events.jsonl", do: func(*testing.T) error {
			src, err := unix.Open(p("scratch/fake.jsonl"), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(src)
			dst, err := unix.Open(p("events.jsonl"), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(dst)
			_, err = unix.CopyFileRange(src, nil, dst, nil, 4096, 0)
			return err
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		{name: "shared writable mmap of events.jsonl", do: escMapShared(p("events.jsonl")), errno: syscall.ENODEV},

		// protocol.json.
		{name: "protocol.json with a changed phase", do: func(*testing.T) error {
			return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC, forgedProtocol(func(m map[string]any) { m["currentPhase"] = "completed" }))
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json with a changed waitingFor", do: func(*testing.T) error {
			return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC, forgedProtocol(func(m map[string]any) { m["waitingFor"] = []string{reviewer} }))
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json patched in place at the phase's offset", do: func(t *testing.T) error {
			cur := readFile(t, filepath.Join(c.folder, "protocol.json"))
			i := strings.Index(cur, `"drafting"`)
			require.Positive(t, i)
			f, err := os.OpenFile(p("protocol.json"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, werr := f.WriteAt([]byte(`"blocked" `), int64(i))
			if err := f.Close(); werr == nil {
				werr = err
			}
			return werr
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json emptied by O_TRUNC",
			do:    func(*testing.T) error { return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC, nil) },
			errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "truncate protocol.json", do: func(*testing.T) error { return os.Truncate(p("protocol.json"), 0) },
			errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "chmod protocol.json", do: func(*testing.T) error { return os.Chmod(p("protocol.json"), 0o600) },
			errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "utimes protocol.json",
			do:    func(*testing.T) error { return os.Chtimes(p("protocol.json"), time.Unix(0, 0), time.Unix(0, 0)) },
			errno: syscall.EPERM, record: protoSetattr,
			explain: "setattr protocol.json: protocol.json is maintained by acpfs"},
		{name: "touch protocol.json", do: escSh(a, "touch protocol.json"), errno: syscall.EPERM, record: protoSetattr,
			explain: "maintained by acpfs"},
		{name: "chown protocol.json", do: func(*testing.T) error { return os.Chown(p("protocol.json"), 65534, 65534) },
			errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "fchmod on a protocol.json write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fchmod(fd, 0o600)
		}, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "futimens on a protocol.json write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), []unix.Timespec{{Sec: 0}, {Sec: 0}}, 0)
		}, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "ftruncate on a read-only protocol.json descriptor", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Ftruncate(fd, 0)
		}, errno: syscall.EINVAL},
		{name: "ftruncate to 0 on a protocol.json write handle is judged at close", do: func(*testing.T) error {
			f, err := os.OpenFile(p("protocol.json"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			terr := f.Truncate(0)
			if cerr := f.Close(); terr == nil {
				terr = cerr
			}
			return terr
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "setxattr on protocol.json",
			do:    func(*testing.T) error { return unix.Setxattr(p("protocol.json"), "user.x", []byte("1"), 0) },
			errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "setxattr", maintained),
			explain: "setxattr protocol.json: protocol files are maintained by acpfs"},
		{name: "removexattr on protocol.json",
			do: func(*testing.T) error { return unix.Removexattr(p("protocol.json"), "user.x") }, errno: syscall.EPERM,
			record:  escRecD(ledger.KindDenied, "protocol.json", "removexattr", maintained),
			explain: "maintained by acpfs"},
		{name: "rm protocol.json", do: func(*testing.T) error { return os.Remove(p("protocol.json")) },
			errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "unlink", cannotRemove),
			explain: "cannot be removed"},
		{name: "mv a forged protocol.json over it",
			do:    func(*testing.T) error { return os.Rename(p("scratch/fake.json"), p("protocol.json")) },
			errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "rename", cannotReplace),
			explain: "rename protocol.json: " + cannotReplace},
		{name: "mv protocol.json away",
			do:    func(*testing.T) error { return os.Rename(p("protocol.json"), p("scratch/p.json")) },
			errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "rename", cannotReplace),
			explain: cannotReplace},
		{name: "shared writable mmap of protocol.json", do: escMapShared(p("protocol.json")), errno: syscall.ENODEV},
		// Look-alike names are ordinary names the grant cannot write: a
		// file made under one is private to this view, where it is an
		// ordinary file, and no other view or reader of the folder sees
		// it.
		{name: "create a look-alike events.jsonl (Cyrillic e)",
			do:      func(*testing.T) error { return escOpen(p("ev\u0435nts.jsonl"), os.O_CREATE|os.O_WRONLY) },
			private: "ev\u0435nts.jsonl"},
		{name: "create a case variant Events.jsonl",
			do:      func(*testing.T) error { return escOpen(p("Events.jsonl"), os.O_CREATE|os.O_WRONLY) },
			private: "Events.jsonl"},
		{name: "create a case variant PROTOCOL.json",
			do:      func(*testing.T) error { return escOpen(p("PROTOCOL.json"), os.O_CREATE|os.O_WRONLY) },
			private: "PROTOCOL.json"},

		// The control directory.
		{name: "write .acpfs/status", do: func(*testing.T) error {
			return escWriteClose(p(".acpfs/status"), os.O_WRONLY, []byte("phase: completed\n"))
		}, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: "open .acpfs/status: " + ctlRO},
		{name: "forge .acpfs/last-error from the shell", do: escSh(a, "echo all good > .acpfs/last-error"),
			errno: syscall.EACCES, record: ctlDenied(".acpfs/last-error", "open"), explain: ctlRO},
		{name: "O_RDWR open of .acpfs/grant.md",
			do: func(*testing.T) error { return escOpen(p(".acpfs/grant.md"), os.O_RDWR) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/grant.md", "open"), explain: ctlRO},
		{name: "O_RDONLY|O_TRUNC open of .acpfs/status",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_RDONLY|os.O_TRUNC) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: ctlRO},
		{name: "O_CREAT open of the existing .acpfs/status",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: ctlRO},
		{name: "O_CREAT|O_EXCL of the existing .acpfs/status",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			errno: syscall.EEXIST},
		{name: "truncate .acpfs/last-error",
			do: func(*testing.T) error { return os.Truncate(p(".acpfs/last-error"), 0) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/last-error", "setattr"), explain: "setattr .acpfs/last-error: " + ctlRO},
		{name: "chmod .acpfs/wait", do: func(*testing.T) error { return os.Chmod(p(".acpfs/wait"), 0o666) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/wait", "setattr"), explain: ctlRO},
		{name: "touch .acpfs/status", do: escSh(a, "touch .acpfs/status"), errno: syscall.EACCES,
			record: ctlDenied(".acpfs/status", "setattr"), explain: ctlRO},
		{name: "chown .acpfs/status", do: func(*testing.T) error { return os.Chown(p(".acpfs/status"), 65534, 65534) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setattr"), explain: ctlRO},
		{name: "create a file in .acpfs",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/forged"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/forged", "create"),
			explain: "create .acpfs/forged: " + ctlRO},
		{name: "mkdir in .acpfs", do: func(*testing.T) error { return os.Mkdir(p(".acpfs/d"), 0o755) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/d", "mkdir"), explain: ctlRO},
		{name: "mkfifo in .acpfs", do: func(*testing.T) error { return unix.Mkfifo(p(".acpfs/fifo"), 0o644) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/fifo", "mknod"), explain: ctlRO},
		{name: "mknod of a regular file in .acpfs",
			do:    func(*testing.T) error { return unix.Mknod(p(".acpfs/node"), unix.S_IFREG|0o644, 0) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/node", ""), explain: ctlRO},
		{name: "ln -s in .acpfs", do: escSh(a, "ln -s status .acpfs/s"), errno: syscall.EACCES,
			record: ctlDenied(".acpfs/s", "symlink"), explain: ctlRO},
		{name: "ln of a file into .acpfs",
			do:    func(*testing.T) error { return os.Link(p("scratch/fake.json"), p(".acpfs/fake.json")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/fake.json", "link"),
			explain: "link .acpfs/fake.json: " + ctlRO},
		{name: "ln of a control file out of .acpfs",
			do:    func(*testing.T) error { return os.Link(p(".acpfs/status"), p("scratch/status")) },
			errno: syscall.EACCES, record: ctlDenied("scratch/status", "link"), explain: escNoLinks},
		{name: "mv a file over .acpfs/status",
			do:    func(*testing.T) error { return os.Rename(p("scratch/fake.json"), p(".acpfs/status")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"),
			explain: "not writable under the grant"},
		{name: "mv .acpfs/wait out",
			do: func(*testing.T) error { return os.Rename(p(".acpfs/wait"), p("scratch/wait")) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/wait", "rename"), explain: "rename .acpfs/wait: " + ctlRO},
		{name: "mv within .acpfs",
			do:    func(*testing.T) error { return os.Rename(p(".acpfs/status"), p(".acpfs/status2")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: ctlRO},
		{name: "RENAME_EXCHANGE of two control files", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p(".acpfs/status"), unix.AT_FDCWD, p(".acpfs/last-error"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: ctlRO},
		{name: "mv .acpfs away", do: func(*testing.T) error { return os.Rename(p(".acpfs"), p("scratch/ctl")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs", "rename"), explain: ".acpfs is reserved"},
		{name: "rmdir .acpfs", do: func(*testing.T) error { return unix.Rmdir(p(".acpfs")) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs", "rmdir"), explain: ".acpfs is reserved"},
		{name: "rmdir of a control file is ENOTDIR from the kernel",
			do: func(*testing.T) error { return unix.Rmdir(p(".acpfs/status")) }, errno: syscall.ENOTDIR},
		{name: "mkdir .acpfs", do: func(*testing.T) error { return os.Mkdir(p(".acpfs"), 0o755) },
			errno: syscall.EEXIST},
		{name: "the planted .acpfs/planted stays shadowed",
			do: func(*testing.T) error { return escReadErr(p(".acpfs/planted")) }, errno: syscall.ENOENT},
		{name: "create .ACPFS", do: func(*testing.T) error { return escOpen(p(".ACPFS"), os.O_CREATE|os.O_WRONLY) },
			private: ".ACPFS"},
		{name: "create '.acpfs ' with a trailing space",
			do: func(*testing.T) error { return escOpen(p(".acpfs "), os.O_CREATE|os.O_WRONLY) }, private: ".acpfs "},
		{name: "mkdir a fullwidth-dot look-alike of .acpfs",
			do: func(*testing.T) error { return os.Mkdir(p("\uff0eacpfs"), 0o755) }, errno: syscall.EACCES,
			record: escRec(ledger.KindDenied, "\uff0eacpfs", "mkdir"), explain: "not writable under the grant"},
		{name: "rm .acpfs/grant.md", do: func(*testing.T) error { return os.Remove(p(".acpfs/grant.md")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/grant.md", "unlink"),
			explain: "unlink .acpfs/grant.md: " + ctlRO},
		{name: "rm -rf .acpfs", do: escSh(a, "rm -rf .acpfs"), errno: syscall.EACCES, record: ctlDenied("", "unlink"),
			explain: ctlRO},
		{name: "setxattr on .acpfs/status",
			do:    func(*testing.T) error { return unix.Setxattr(p(".acpfs/status"), "user.x", []byte("1"), 0) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setxattr"), explain: ctlRO},
		{name: "removexattr on .acpfs/status",
			do: func(*testing.T) error { return unix.Removexattr(p(".acpfs/status"), "user.x") }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/status", "removexattr"), explain: ctlRO},
	})

	t.Run("control files survive every attempt", func(t *testing.T) {
		names, err := os.ReadDir(p(".acpfs"))
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		assert.Subset(t, got, []string{"grant.md", "last-error", "status"})
		// wait is not listed (its reads block, and globs must not open
		// it), but it is there.
		assert.NotContains(t, got, "wait")
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p(".acpfs/wait"), &st))
		assert.EqualValues(t, unix.S_IFREG, st.Mode&unix.S_IFMT)
		assert.Contains(t, readFile(t, p(".acpfs/grant.md")), "G-")
		assert.Contains(t, readFile(t, p(".acpfs/last-error")), ctlRO)
	})

	t.Run("the control files are acpfs's own, not the planted ones", func(t *testing.T) {
		st := readFile(t, p(".acpfs/status"))
		assert.Contains(t, st, "phase: drafting")
		assert.Contains(t, st, "agent: alice")
		names, err := os.ReadDir(p(".acpfs"))
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		assert.NotContains(t, got, "planted")
		// A .acpfs below the root is an ordinary directory.
		assert.Equal(t, "ready\n", readFile(t, p("scratch/.acpfs/wait")))
	})

	t.Run("a shell's echo > protocol.json exits 0 but changes nothing", func(t *testing.T) {
		// bash ignores close(2) errors of redirections, where the
		// protocol.json refusal is reported: the ledger and last-error
		// are the agent's only evidence.
		before := escTree(t, c.folder)
		nrec := len(c.records())
		out, code := escShell(t, a.dir, `echo '{"currentPhase":"completed"}' > protocol.json`)
		assert.Equal(t, 0, code, out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		assert.True(t, escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindDenied, path: "protocol.json", op: "write"}))
		assert.Contains(t, escLastError(t, a), "write protocol.json")
	})

	// Appends that are (partly) accepted: what the writer sees, and that
	// the accepted event is written exactly once.
	eventsPath := filepath.Join(c.folder, "events.jsonl")
	accepted := func(t *testing.T, withForged bool, fn func(valid, forged string)) {
		t.Helper()
		valid, forged := drafted(), c.event(reviewer, "blocked", nil)
		before := readFile(t, eventsPath)
		seq := c.snapshot().LastSeq
		nrec := len(c.records())
		fn(valid, forged)
		assert.Equal(t, before+valid+"\n", readFile(t, eventsPath), "the valid event must be appended once, the forged one never")
		assert.Equal(t, seq+1, c.snapshot().LastSeq)
		var acc, rej int
		for _, r := range c.records()[nrec:] {
			switch r.Kind {
			case ledger.KindAppendAccepted:
				acc++
				assert.Equal(t, fmt.Sprintf("seq %d deliverable_drafted", seq+1), r.Detail)
			case ledger.KindAppendRejected:
				rej++
				assert.Contains(t, r.Detail, "from-mismatch")
			}
		}
		assert.Equal(t, 1, acc, "append_accepted records")
		if withForged {
			assert.GreaterOrEqual(t, rej, 1, "append_rejected records")
		} else {
			assert.Zero(t, rej, "append_rejected records")
		}
	}
	t.Run("an event split across many small writes is appended once", func(t *testing.T) {
		accepted(t, false, func(valid, _ string) {
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			line := valid + "\n"
			for i := 0; i < len(line); i += 3 {
				_, err := f.Write([]byte(line[i:min(i+3, len(line))]))
				require.NoError(t, err)
			}
			require.NoError(t, f.Close())
		})
	})
	t.Run("an event without its final newline is appended at close", func(t *testing.T) {
		accepted(t, false, func(valid, _ string) {
			require.NoError(t, escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(valid)))
		})
	})
	t.Run("an extra phase field is kept as other tools write it, and moves no phase", func(t *testing.T) {
		// Forward compatibility: unknown fields are accepted. The phase is
		// the state machine's, never a field of an event.
		line := edit("phase", "completed")()
		before := readFile(t, eventsPath)
		seq := c.snapshot().LastSeq
		require.NoError(t, escAppend(a, line))
		assert.Equal(t, before+line+"\n", readFile(t, eventsPath))
		assert.Equal(t, seq+1, c.snapshot().LastSeq)
		assert.Equal(t, "drafting", c.snapshot().Phase)
		assert.Contains(t, readFile(t, p(".acpfs/status")), "phase: drafting")
		assert.Contains(t, readFile(t, filepath.Join(c.folder, "protocol.json")), `"currentPhase": "drafting"`)
	})
	t.Run("two events in one write: Go sees a short write, then EPERM", func(t *testing.T) {
		accepted(t, true, func(valid, forged string) {
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			n, err := f.Write([]byte(valid + "\n" + forged + "\n"))
			assert.Equal(t, len(valid)+1, n)
			assert.ErrorIs(t, err, syscall.EPERM)
			require.NoError(t, f.Close())
		})
	})
	t.Run("two events in one write: bash echo reports a write error", func(t *testing.T) {
		accepted(t, true, func(valid, forged string) {
			out, code := escShell(t, a.dir, fmt.Sprintf("echo '%s\n%s' >> events.jsonl", valid, forged))
			assert.Equal(t, 1, code)
			assert.Contains(t, out, "write error: Operation not permitted")
		})
	})
	t.Run("two events in one write: Python raises PermissionError", func(t *testing.T) {
		accepted(t, true, func(valid, forged string) {
			out, code := escPython(t, "import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(sys.argv[2] + '\\n' + sys.argv[3] + '\\n')\n", p("events.jsonl"), valid, forged)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out, "PermissionError: [Errno 1] Operation not permitted")
		})
	})
	t.Run("two events in one write: unbuffered Python gets a short count and no error", func(t *testing.T) {
		// Documented: os.write semantics. A caller that ignores the count
		// never learns that its second event was refused.
		accepted(t, true, func(valid, forged string) {
			out, code := escPython(t, "import sys\nf = open(sys.argv[1], 'ab', buffering=0)\nprint(f.write((sys.argv[2] + '\\n' + sys.argv[3] + '\\n').encode()))\nf.close()\n", p("events.jsonl"), valid, forged)
			assert.Equal(t, 0, code, out)
			assert.Equal(t, fmt.Sprintf("%d\n", len(valid)+1), out)
		})
	})
	t.Run("a 10 MiB line appends nothing and the daemon keeps working", func(t *testing.T) {
		before := escTree(t, c.folder)
		nrec := len(c.records())
		out, code := escShell(t, a.dir, `set -o pipefail; head -c 10485760 /dev/zero | tr '\0' x | sed 's/^/{"summary":"/; s/$/"}/' >> events.jsonl`)
		assert.NotZero(t, code, "the writer must see the refusal: %s", out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		assert.True(t, escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindAppendRejected, path: "events.jsonl", op: "append", detail: "line longer than"}), out)
		assert.Contains(t, escLastError(t, a), "line longer than")
		accepted(t, false, func(valid, _ string) { require.NoError(t, escAppend(a, valid)) })
		assert.Contains(t, readFile(t, p(".acpfs/status")), "phase: drafting")
	})
	t.Run("every write of an over-long line fails, up to its newline; the next line is judged afresh", func(t *testing.T) {
		const maxLine = 1 << 20
		before := readFile(t, eventsPath)
		nrec := len(c.records())
		f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		defer f.Close()
		write := func(b []byte) error { _, err := unix.Write(int(f.Fd()), b); return err }
		head := append([]byte(`{"summary":"`), []byte(strings.Repeat("x", maxLine-64))...)
		require.NoError(t, write(head), "a long line below the limit is buffered")
		assert.ErrorIs(t, write([]byte(strings.Repeat("y", 128))), syscall.EINVAL, "the write crossing the limit")
		assert.ErrorIs(t, write([]byte("zzz")), syscall.EINVAL, "a later write of the same line")
		assert.ErrorIs(t, write([]byte("zz\"}")), syscall.EINVAL, "another")
		assert.ErrorIs(t, write([]byte("z\n")), syscall.EINVAL, "the write holding its newline")
		assert.Equal(t, before, readFile(t, eventsPath), "nothing is appended")
		valid := drafted()
		require.NoError(t, write([]byte(valid+"\n")), "the next line")
		assert.Equal(t, before+valid+"\n", readFile(t, eventsPath))
		var rej, acc int
		for _, r := range c.records()[nrec:] {
			switch r.Kind {
			case ledger.KindAppendRejected:
				rej++
				assert.Contains(t, r.Detail, "line longer than")
			case ledger.KindAppendAccepted:
				acc++
			}
		}
		assert.Equal(t, 1, rej, "one refusal for the over-long line")
		assert.Equal(t, 1, acc)
	})
}
