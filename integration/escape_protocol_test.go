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

// TestEscapeProtocolForgery: the owner (and the reviewer, where it says
// so) forges events, overwrites, truncates and replaces events.jsonl and
// protocol.json, and attacks the control directory (escape_control_test.go).
func TestEscapeProtocolForgery(t *testing.T) {
	fg := newEscForgery(t)
	escRunFamilies(t, escEnv{c: fg.c, v: fg.a, other: fg.b},
		escEventForgeries(fg), escEventsFileAttempts(fg), escProtocolFileAttempts(fg), escControlDirAttempts(fg),
	)
	escControlDirChecks(t, fg)
	escShellProtocolCheck(t, fg)
	escAcceptedAppendChecks(t, fg)
	escLongLineChecks(t, fg)
}

// The policy's refusals of changes to the protocol files other than
// through their handles (fs/policy.go, managedChange), and of changes to
// the control directory.
const (
	escCannotRemove  = "protocol files cannot be removed"
	escCannotReplace = "protocol files cannot be renamed or replaced"
	escMaintained    = "protocol files are maintained by acpfs"
	escCtlRO         = ".acpfs is read-only"
)

// escLongLineScript appends one 10 MiB line to events.jsonl from the shell.
const escLongLineScript = `head -c 10485760 /dev/zero | tr '\0' x | sed 's/^/{"summary":"/; s/$/"}/' >> events.jsonl`

// escDeniedRec is the record of a change the grant or the control
// directory refuses.
func escDeniedRec(path, op string) *escRecord { return escRec(ledger.KindDenied, path, op) }

// escProtoDenied is the record of a refused change of protocol.json.
func escProtoDenied(op string) *escRecord { return escRec(ledger.KindDenied, "protocol.json", op) }

// escAppendAs appends the line line() makes through v.
func escAppendAs(v *view, line func() string) func(*testing.T) error {
	return func(*testing.T) error { return escAppend(v, line()) }
}

// escForgery is the collaboration of TestEscapeProtocolForgery: in
// drafting, with forged logs and look-alikes of the control files planted.
type escForgery struct {
	t    *testing.T
	c    *collab
	a, b *view // the owner's and the reviewer's views
}

func newEscForgery(t *testing.T) *escForgery {
	r := newRun(t)
	c, a := r.c, r.alice
	require.NoError(t, os.WriteFile(a.path(primary), []byte(designSpec("In Review")), 0o644))
	r.must(a, owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})

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
	return &escForgery{t: t, c: c, a: a, b: r.bob}
}

// drafted is the next valid event: the owner drafts the deliverable.
func (fg *escForgery) drafted() string {
	return fg.c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
}

// edit changes one field of the next valid event (nil removes it).
func (fg *escForgery) edit(field string, value any) func() string {
	return func() string {
		var m map[string]any
		require.NoError(fg.t, json.Unmarshal([]byte(fg.drafted()), &m))
		if value == nil {
			delete(m, field)
		} else {
			m[field] = value
		}
		out, err := json.Marshal(m)
		require.NoError(fg.t, err)
		return string(out)
	}
}

// forgedProtocol is the folder's protocol.json changed by mutate.
func (fg *escForgery) forgedProtocol(mutate func(m map[string]any)) []byte {
	var m map[string]any
	require.NoError(fg.t, json.Unmarshal([]byte(readFile(fg.t, filepath.Join(fg.c.folder, "protocol.json"))), &m))
	mutate(m)
	out, err := json.MarshalIndent(m, "", "  ")
	require.NoError(fg.t, err)
	return append(out, '\n')
}

// accepted runs fn, which appends the valid event (and the forged one
// when withForged), and checks what an append that is (partly) accepted
// must leave: the valid event written exactly once, the forged one never.
func (fg *escForgery) accepted(t *testing.T, withForged bool, fn func(valid, forged string)) {
	t.Helper()
	c, drafted, eventsPath := fg.c, fg.drafted, filepath.Join(fg.c.folder, "events.jsonl")
	valid, forged := drafted(), c.event(reviewer, "blocked", nil)
	before := readFile(t, eventsPath)
	seq := c.snapshot().LastSeq
	nrec := len(c.records())
	fn(valid, forged)
	assert.Equal(t, before+valid+"\n", readFile(t, eventsPath),
		"the valid event must be appended once, the forged one never")
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

// escEventForgeries append events the protocol refuses.
func escEventForgeries(fg *escForgery) []escAttempt {
	t, c, a, b, p, drafted, edit := fg.t, fg.c, fg.a, fg.b, fg.a.path, fg.drafted, fg.edit
	appendAs, rejected := escAppendAs, escRec(ledger.KindAppendRejected, "events.jsonl", "append")
	return []escAttempt{
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
			do: appendAs(a, func() string {
				return strings.SplitN(readFile(t, filepath.Join(c.folder, "events.jsonl")), "\n", 2)[0]
			}),
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
			do: appendAs(a,
				func() string { return c.event(owner, "completed", map[string]any{"doc": "conclusion.md"}) }),
			errno: syscall.EPERM, record: rejected, explain: "readiness-passed-required"},
		{name: "deliverable_frozen in drafting", do: appendAs(a, func() string {
			return c.event(owner, "deliverable_frozen",
				map[string]any{"doc": primary, "role": "primary",
					"sha256": fileSHA(t, filepath.Join(c.folder, primary))})
		}), errno: syscall.EPERM, record: rejected, explain: "not allowed in phase drafting"},
		{name: "review_submitted out of turn", as: b,
			do: appendAs(b, func() string { return c.event(reviewer, "review_submitted", nil) }), errno: syscall.EPERM,
			record: rejected, explain: "append events.jsonl"},
		{name: "two events, the refused one first", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND,
				[]byte(c.event(reviewer, "blocked", nil)+"\n"+drafted()+"\n"))
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
			line := `{"summary":"` + strings.Repeat("x", 10<<20) + "\"}\n"
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(line))
		}, errno: syscall.EINVAL, record: rejected, explain: "line longer than"},
		{name: "10 MiB line from the shell",
			do:    escSh(a, escLongLineScript),
			errno: syscall.EINVAL, record: rejected, explain: "line longer than"},
	}
}

// escEventsFileAttempts overwrite, truncate and replace events.jsonl.
func escEventsFileAttempts(fg *escForgery) []escAttempt {
	t, c, a, p := fg.t, fg.c, fg.a, fg.a.path
	rejected, cannotRemove := escRec(ledger.KindAppendRejected, "events.jsonl", "append"), escCannotRemove
	cannotReplace, maintained := escCannotReplace, escMaintained
	evSetattr := escRecD(ledger.KindAppendRejected, "events.jsonl", "setattr", "events.jsonl is append-only")
	evTruncate := escRecD(ledger.KindAppendRejected, "events.jsonl", "truncate", "events.jsonl is append-only")
	return []escAttempt{
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
			errno: syscall.EPERM, record: evTruncate, explain: "append-only"},
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
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Ftruncate(fd, 10)
		}, errno: syscall.EPERM, record: evTruncate, explain: "append-only"},
		{name: "ftruncate to its own size on an events.jsonl write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			return unix.Ftruncate(fd, st.Size)
		}, errno: syscall.EPERM, record: evTruncate, explain: "append-only"},
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
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/fake.jsonl"), unix.AT_FDCWD, p("events.jsonl"),
				unix.RENAME_NOREPLACE)
		}, errno: syscall.EEXIST},
		{name: "RENAME_EXCHANGE of a forged log with events.jsonl", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/fake.jsonl"), unix.AT_FDCWD, p("events.jsonl"),
				unix.RENAME_EXCHANGE)
		}, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace),
			explain: cannotReplace},
		{name: "ln events.jsonl to a second name",
			do:    func(*testing.T) error { return os.Link(p("events.jsonl"), p("scratch/ev.jsonl")) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/ev.jsonl", "link"), explain: escNoLinks},
		{name: "ln protocol.json to a second name",
			do:    func(*testing.T) error { return os.Link(p("protocol.json"), p("scratch/p.json")) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/p.json", "link"), explain: escNoLinks},
		{name: "fallocate on an events.jsonl handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 64)
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "fallocate"),
			explain: "append-only"},
		{name: "copy_file_range of a forged log into events.jsonl", do: func(*testing.T) error {
			src, err := unix.Open(p("scratch/fake.jsonl"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(src)
			dst, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(dst)
			_, err = unix.CopyFileRange(src, nil, dst, nil, 4096, 0)
			return err
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		{name: "shared writable mmap of events.jsonl", do: escMapShared(p("events.jsonl")), errno: syscall.ENODEV},
	}
}

// escProtocolFileAttempts forge protocol.json and make look-alikes of the
// protocol files.
func escProtocolFileAttempts(fg *escForgery) []escAttempt {
	c, a, p, protoDenied, cannotRemove := fg.c, fg.a, fg.a.path, escProtoDenied, escCannotRemove
	cannotReplace, maintained := escCannotReplace, escMaintained
	protoSetattr := escRecD(ledger.KindDenied, "protocol.json", "setattr", "protocol.json is maintained by acpfs")
	protoTruncate := escRecD(ledger.KindDenied, "protocol.json", "truncate", "protocol.json is maintained by acpfs")
	forgedProtocol := fg.forgedProtocol
	return []escAttempt{
		// protocol.json.
		{name: "protocol.json with a changed phase", do: func(*testing.T) error {
			return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC,
				forgedProtocol(func(m map[string]any) { m["currentPhase"] = "completed" }))
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json with a changed waitingFor", do: func(*testing.T) error {
			return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC,
				forgedProtocol(func(m map[string]any) { m["waitingFor"] = []string{reviewer} }))
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
			errno: syscall.EPERM, record: protoTruncate, explain: "maintained by acpfs"},
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
			fd, err := unix.Open(p("protocol.json"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fchmod(fd, 0o600)
		}, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "futimens on a protocol.json write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd),
				[]unix.Timespec{{Sec: 0}, {Sec: 0}}, 0)
		}, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "ftruncate on a read-only protocol.json descriptor", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
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
	}
}

// escShellProtocolCheck: a shell's refused redirection to protocol.json.
func escShellProtocolCheck(t *testing.T, fg *escForgery) {
	c, a := fg.c, fg.a
	t.Run("a shell's echo > protocol.json exits 0 but changes nothing", func(t *testing.T) {
		// bash ignores close(2) errors of redirections, where the
		// protocol.json refusal is reported: the ledger and last-error
		// are the agent's only evidence.
		before := escTree(t, c.folder)
		nrec := len(c.records())
		out, code := escShell(t, a.dir, `echo '{"currentPhase":"completed"}' > protocol.json`)
		assert.Equal(t, 0, code, out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		assert.True(t,
			escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindDenied, path: "protocol.json", op: "write"}))
		assert.Contains(t, escLastError(t, a), "write protocol.json")
	})
}

// escAcceptedAppendChecks: appends that are (partly) accepted, what the
// writer sees, and that the accepted event is written exactly once.
func escAcceptedAppendChecks(t *testing.T, fg *escForgery) {
	c, a, p, edit, eventsPath := fg.c, fg.a, fg.a.path, fg.edit, filepath.Join(fg.c.folder, "events.jsonl")
	accepted := fg.accepted
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
			out, code := escPython(t,
				"import sys\nwith open(sys.argv[1], 'a') as f:\n"+
					"    f.write(sys.argv[2] + '\\n' + sys.argv[3] + '\\n')\n",
				p("events.jsonl"), valid, forged)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out, "PermissionError: [Errno 1] Operation not permitted")
		})
	})
	t.Run("two events in one write: unbuffered Python gets a short count and no error", func(t *testing.T) {
		// Documented: os.write semantics. A caller that ignores the count
		// never learns that its second event was refused.
		accepted(t, true, func(valid, forged string) {
			out, code := escPython(t,
				"import sys\nf = open(sys.argv[1], 'ab', buffering=0)\n"+
					"print(f.write((sys.argv[2] + '\\n' + sys.argv[3] + '\\n').encode()))\nf.close()\n",
				p("events.jsonl"), valid, forged)
			assert.Equal(t, 0, code, out)
			assert.Equal(t, fmt.Sprintf("%d\n", len(valid)+1), out)
		})
	})
}

// escLongLineChecks: an over-long line appends nothing, and the view keeps
// judging the lines after it.
func escLongLineChecks(t *testing.T, fg *escForgery) {
	c, a, p, drafted := fg.c, fg.a, fg.a.path, fg.drafted
	eventsPath, accepted := filepath.Join(fg.c.folder, "events.jsonl"), fg.accepted
	t.Run("a 10 MiB line appends nothing and the daemon keeps working", func(t *testing.T) {
		before := escTree(t, c.folder)
		nrec := len(c.records())
		out, code := escShell(t, a.dir, "set -o pipefail; "+escLongLineScript)
		assert.NotZero(t, code, "the writer must see the refusal: %s", out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		want := escRecord{kind: ledger.KindAppendRejected, path: "events.jsonl", op: "append",
			detail: "line longer than"}
		assert.True(t, escHasRecord(c.records()[nrec:], want), out)
		assert.Contains(t, escLastError(t, a), "line longer than")
		accepted(t, false, func(valid, _ string) { require.NoError(t, escAppend(a, valid)) })
		assert.Contains(t, readFile(t, p(".acpfs/status")), "phase: drafting")
	})
	t.Run("one write(2) of an over-long line, cut by the kernel: its short count is not taken for success, close reports it",
		func(t *testing.T) {
			before := readFile(t, eventsPath)
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			line := []byte(`{"summary":"` + strings.Repeat("x", 3<<20) + "\"}\n")
			n, werr := unix.Write(int(f.Fd()), line)
			if werr == nil {
				assert.Less(t, n, len(line), "the line is not taken whole")
			}
			assert.ErrorIs(t, f.Close(), syscall.EINVAL, "a writer that does not retry learns of the refusal at close")
			assert.Equal(t, before, readFile(t, eventsPath), "nothing is appended")
			accepted(t, false, func(valid, _ string) { require.NoError(t, escAppend(a, valid)) })
		})
	t.Run("every write of an over-long line fails, up to its newline; the next line is judged afresh",
		func(t *testing.T) {
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
