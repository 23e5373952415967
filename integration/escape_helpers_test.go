package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
	acpfsfs "github.com/acpfs/acpfs/view"
)

// The escape suite plays an agent that tries every trick it can think of
// to read what its grant hides, to write where it may not, to change a
// frozen deliverable or to forge protocol state. Each attempt is one
// escAttempt, run by escRun, which checks the refusal, the ledger record
// it left, .acpfs/last-error, and that the backing folder did not change.
//
// A few attempts are not refused: a new file under a name the grant does
// not let the agent write, in a directory where it may write something,
// is made privately (fs/staging.go). For those escRun checks that the
// file exists in the attempting view only, never in another view nor in
// the backing folder under its name, and that whatever the name hid on
// the backing folder is untouched and unread.

// escSecret is the oracle's content; no output of an attempt may hold it.
const escSecret = "the secret answer"

// The explanations of the refusals the policy table (fs/policy.go) gives
// for hard links, concealed entries and symlinks.
const (
	escNoLinks = "hard links are not allowed in a view; copy the file instead"
	// A regular file with several names is concealed: its lookup is
	// refused (quietly) with this detail.
	escHardLinked = "hard-linked file: its other names cannot be checked against the grant"
	// A new name where a concealed entry sits, when the grant could
	// write the name.
	escNameHeld = "name held by an entry the view does not show"
	// A symlink leading to a hidden path or out of the folder is
	// concealed.
	escSymlinkHidden = "symlink target hidden or outside the folder"
	// A descriptor served by the daemon after the grant took its file.
	escNoLongerReadable = "the grant no longer lets this agent read the file"
	// The detail of the write record of a file made privately.
	escPrivateFile = "private temporary file of this view"
	// A required protocol document moved away or removed.
	escRequiredDoc = "a document the protocol requires can be edited, not removed or renamed away"
	// A directory whose content the grant does not show entirely.
	escDirHoldsHidden = "a directory holding entries the view does not show cannot be renamed"
)

// escPrivateMarker is what escRun writes into a private file to tell it
// from anything else under its name.
const escPrivateMarker = "private draft of this view\n"

// escHiddenWords are fragments of hidden paths that an agent which never
// named them must not find in .acpfs/last-error.
var escHiddenWords = []string{"oracle", "answer.md", "agent_runs", "communication_ledger", "réponse", "private"}

// escRefusalKinds are the ledger kinds a refusal writes.
var escRefusalKinds = map[ledger.Kind]bool{
	ledger.KindDenied: true, ledger.KindFrozenRefused: true, ledger.KindAppendRejected: true,
}

// escRecord is the ledger record an attempt must leave. An empty path or
// op matches any.
type escRecord struct {
	kind             ledger.Kind
	path, op, detail string
}

// escAttempt is one escape attempt.
type escAttempt struct {
	name string
	// do makes the attempt and returns its error (a syscall error, or an
	// escShellError for a shell command).
	do func(t *testing.T) error
	// errno is the refusal expected. For shell attempts it is matched by
	// its message in the command's output.
	errno syscall.Errno
	// record is the ledger record expected among those the attempt
	// wrote; nil means the attempt must leave no refusal record (the
	// kernel refused it before acpfs was asked, or the name does not
	// exist at all).
	record *escRecord
	// explain is a fragment .acpfs/last-error must hold afterwards; ""
	// means last-error must not change (hidden names are refused
	// silently, so that the agent learns nothing about them).
	explain string
	// echoes is a hidden path the attempt names itself, which
	// last-error may therefore repeat (it reveals nothing the agent did
	// not already type, and says the same whether the name exists).
	echoes string
	// as is the view making the attempt when it is not the group's.
	as *view
	// private, when set, says that the attempt is not refused: it makes
	// a private file of the view under this folder-relative name (see
	// fs/staging.go). errno and explain must then be unset; record, if
	// set, is a quiet lookup refusal the attempt leaves on its way (the
	// name was held by an entry the view conceals). escRun checks the
	// file and removes it through the view afterwards, so that later
	// attempts find the name free again.
	private string
	// privateTemp, when set, says that the refused attempt made a private
	// temporary file whose name starts with this prefix on its way (sed
	// -i, whose rename onto the target is the refused step). escRun
	// checks its record and removes it if the tool left it.
	privateTemp string
	// bug, when set, marks an attempt that acpfs does not refuse as
	// expected yet (it succeeds, or answers, records or explains the
	// refusal wrongly): the subtest is skipped with "BUG: <bug>" unless
	// ACPFS_ESCAPE_BUGS=1.
	bug string
}

// escShellError is a shell command that failed.
type escShellError struct {
	script string
	out    string
	code   int
}

func (e *escShellError) Error() string {
	return fmt.Sprintf("%q exited %d: %s", e.script, e.code, e.out)
}

// escShell runs script with bash inside dir and returns its combined
// output and exit status. Like view.sh, the shell enters the view itself:
// this process serves the view, so its child must not chdir into it
// before exec.
func escShell(t *testing.T, dir, script string) (string, int) {
	t.Helper()
	out, err := exec.Command("bash", "-c", "cd \"$0\" && "+script, dir).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// escSh is an attempt made by a shell command in v. A failure becomes an
// escShellError; output holding the oracle's content fails the test at
// once, whatever the exit status.
func escSh(v *view, script string) func(t *testing.T) error {
	return func(t *testing.T) error {
		t.Helper()
		out, code := escShell(t, v.dir, script)
		require.NotContains(t, out, escSecret, "%s leaked the oracle", script)
		if code != 0 {
			return &escShellError{script: script, out: out, code: code}
		}
		return nil
	}
}

// escBug skips a subtest that shows a known bug, unless
// ACPFS_ESCAPE_BUGS=1 asks to see it fail.
func escBug(t *testing.T, bug string) {
	t.Helper()
	if bug != "" && os.Getenv("ACPFS_ESCAPE_BUGS") != "1" {
		t.Skip("BUG: " + bug)
	}
}

// escEnv is the collaboration and the view a group of attempts shares.
// other is another agent's view of the same folder: it must never see
// what an attempt made privately.
type escEnv struct {
	c     *collab
	v     *view
	other *view
}

// escRun runs each attempt as a subtest.
func escRun(t *testing.T, e escEnv, attempts []escAttempt) {
	t.Helper()
	seen := map[string]bool{}
	for _, a := range attempts {
		require.False(t, seen[a.name], "duplicate attempt %q", a.name)
		seen[a.name] = true
		t.Run(a.name, func(t *testing.T) { escCheck(t, e, a) })
	}
}

func escCheck(t *testing.T, e escEnv, a escAttempt) {
	escBug(t, a.bug)
	if a.as != nil {
		if e.other == a.as {
			e.other = e.v
		}
		e.v = a.as
	}
	before := escTree(t, e.c.folder)
	stagedBefore := escStaged(t, e.c.folder)
	var otherBefore string
	if a.private != "" {
		require.NotNil(t, e.other, "a private create needs another view to check")
		otherBefore = escSees(t, e.other, a.private)
	}
	nrec := len(e.c.records())
	lastBefore := escLastError(t, e.v)

	err := a.do(t)

	if a.private != "" {
		// Not refused: the file is made privately.
		require.Zero(t, a.errno, "a private create expects no errno")
		require.Empty(t, a.explain, "a private create explains nothing")
		require.NoError(t, err, "the private create of %q failed", a.private)
	} else {
		// The refusal.
		require.Error(t, err, "the attempt succeeded")
		var se *escShellError
		if errors.As(err, &se) {
			assert.Contains(t, strings.ToLower(se.out), strings.ToLower(a.errno.Error()), "shell refusal: %v", err)
		} else {
			assert.ErrorIs(t, err, a.errno, "got %v", err)
		}
	}

	// Nothing changed on the backing folder: every file's bytes, mode,
	// mtime and xattrs, every symlink's target, every directory's
	// entries (events.jsonl and protocol.json included). The views'
	// private files live under .acpfs-staging, which escTree leaves out
	// and escStaged describes.
	escRequireSameTree(t, before, escTree(t, e.c.folder))
	switch {
	case a.private != "":
		assert.Len(t, escStaged(t, e.c.folder), len(stagedBefore)+1, "one private file is made")
	case a.privateTemp == "":
		assert.Equal(t, stagedBefore, escStaged(t, e.c.folder), "a refused attempt made or changed a private file")
	}

	// The ledger record.
	var refusals []ledger.Record
	for _, r := range e.c.records()[nrec:] {
		if escRefusalKinds[r.Kind] {
			refusals = append(refusals, r)
		}
	}
	switch {
	case a.record == nil:
		assert.Empty(t, refusals, "a refusal record for an attempt acpfs never saw")
	default:
		assert.True(t, escHasRecord(refusals, *a.record), "no ledger record %+v among %s", *a.record,
			escFmtRecords(refusals))
		for _, r := range refusals {
			assert.Equal(t, e.v.m.FS.Grant().AgentID, r.Agent)
			assert.Equal(t, e.v.m.FS.Grant().GrantID, r.Grant)
		}
	}
	if a.private != "" {
		// Only the quiet refusal of the lookup that found the name
		// concealed: the create itself is not refused.
		for _, r := range refusals {
			assert.Equal(t, "lookup", string(r.Op), "a private create was refused: %s", escFmtRecords([]ledger.Record{r}))
		}
	}

	// The explanation.
	lastAfter := escLastError(t, e.v)
	if a.explain == "" {
		assert.Equal(t, lastBefore, lastAfter, ".acpfs/last-error changed for a silent refusal")
	} else {
		assert.Contains(t, lastAfter, a.explain)
	}
	if lastAfter != lastBefore {
		echoed := lastAfter
		if a.echoes != "" {
			echoed = strings.ReplaceAll(echoed, a.echoes, "")
		}
		escNoHiddenWords(t, echoed)
	}

	switch {
	case a.private != "":
		escCheckPrivate(t, e, a.private, before, stagedBefore, otherBefore, nrec)
	case a.privateTemp != "":
		escDropPrivateTemps(t, e, a.privateTemp, stagedBefore, nrec)
	}
}

// escCheckPrivate checks the private file an attempt made at rel, then
// removes it through the view: it is recorded as a private create, it
// is shown in the attempting view only, its bytes go to the view's
// staging directory and never to the backing entry its name may hide,
// and it leaves nothing behind once removed.
func escCheckPrivate(t *testing.T, e escEnv, rel string, before, stagedBefore map[string]string,
	otherBefore string, nrec int) {
	t.Helper()
	recs := e.c.records()[nrec:]
	want := escRecord{kind: ledger.KindWrite, path: rel, op: "create", detail: escPrivateFile}
	assert.True(t, escHasRecord(recs, want), "no ledger record %+v among %s", want, escFmtRecords(recs))
	for _, r := range recs {
		if r.Kind == ledger.KindWrite {
			assert.Equal(t, e.v.m.FS.Grant().AgentID, r.Agent)
			assert.Equal(t, e.v.m.FS.Grant().GrantID, r.Grant)
		}
		// Nothing the name hid on the backing folder was read.
		assert.NotEqual(t, ledger.KindRead, r.Kind, "a read was recorded: %+v", r)
	}

	dir, base := filepath.Dir(rel), filepath.Base(rel)
	if dir == "." {
		dir = ""
	}
	// The attempting view shows it, under its name, as a regular file
	// with what was written to it, and never the bytes its name hides.
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(e.v.path(rel), &st), "the private file is not shown in its view")
	assert.EqualValues(t, unix.S_IFREG, st.Mode&unix.S_IFMT)
	assert.EqualValues(t, 1, st.Nlink)
	assert.Contains(t, escGetdents(t, e.v.path(dir)), base, "the private file is not listed in its view")
	b, err := os.ReadFile(e.v.path(rel))
	require.NoError(t, err)
	assert.NotContains(t, string(b), escSecret)
	require.NoError(t, os.WriteFile(e.v.path(rel), []byte(escPrivateMarker), 0o644))
	assert.Equal(t, escPrivateMarker, readFile(t, e.v.path(rel)))
	// Its bytes are in the staging directory only.
	escRequireSameTree(t, before, escTree(t, e.c.folder))
	staged := escStaged(t, e.c.folder)
	assert.Len(t, staged, len(stagedBefore)+1)
	assert.Contains(t, escValues(staged), escDigest([]byte(escPrivateMarker)),
		"the private file's bytes are not in the staging directory")

	// Another view sees under its name what it saw before (nothing, or
	// the backing entry), and never reads the private file.
	assert.Equal(t, otherBefore, escSees(t, e.other, rel), "another view sees the private file")
	if ob, err := os.ReadFile(e.other.path(rel)); err == nil {
		assert.NotContains(t, string(ob), escPrivateMarker, "another view reads the private file")
	}

	// Removed through its view, it is gone, and so is its staged copy.
	require.NoError(t, os.Remove(e.v.path(rel)))
	_, err = os.Lstat(e.v.path(rel))
	assert.ErrorIs(t, err, syscall.ENOENT, "the private file is still shown after its removal")
	assert.NotContains(t, escGetdents(t, e.v.path(dir)), base)
	assert.Equal(t, stagedBefore, escStaged(t, e.c.folder), "the private file's staged copy is left")
	escRequireSameTree(t, before, escTree(t, e.c.folder))
}

// escSees describes what v shows at rel: the entry's type, inode, size
// and mtime (or the lookup's error), and the names listed in its
// directory (or the listing's error).
func escSees(t *testing.T, v *view, rel string) string {
	t.Helper()
	var b strings.Builder
	var st unix.Stat_t
	if err := unix.Lstat(v.path(rel), &st); err != nil {
		fmt.Fprintf(&b, "lstat: %v", err)
	} else {
		fmt.Fprintf(&b, "type=%o ino=%d size=%d mtime=%d", st.Mode&unix.S_IFMT, st.Ino, st.Size, st.Mtim.Nano())
	}
	entries, err := os.ReadDir(filepath.Dir(v.path(rel)))
	if err != nil {
		fmt.Fprintf(&b, "; readdir: %v", err)
	} else {
		var names []string
		for _, en := range entries {
			names = append(names, en.Name())
		}
		fmt.Fprintf(&b, "; listed: %q", names)
	}
	return b.String()
}

// escDropPrivateTemps checks that the attempt made a private temporary
// file named prefix* (recorded, shown in no other view) and removes what
// the tool left of it through the view, so that the staging directory is
// as it was.
func escDropPrivateTemps(t *testing.T, e escEnv, prefix string, stagedBefore map[string]string, nrec int) {
	t.Helper()
	var temps []string
	for _, r := range e.c.records()[nrec:] {
		if r.Kind == ledger.KindWrite && r.Op == "create" && r.Detail == escPrivateFile &&
			strings.HasPrefix(filepath.Base(r.Path), prefix) {
			temps = append(temps, r.Path)
		}
	}
	require.NotEmpty(t, temps, "no private temporary file %s* was recorded", prefix)
	for _, rel := range temps {
		_, err := os.Lstat(filepath.Join(e.c.folder, rel))
		assert.ErrorIs(t, err, os.ErrNotExist, "the temporary file %s is in the backing folder", rel)
		if e.other != nil {
			_, err = os.Lstat(e.other.path(rel))
			assert.ErrorIs(t, err, syscall.ENOENT, "another view shows the temporary file %s", rel)
		}
		if _, err := os.Lstat(e.v.path(rel)); err == nil {
			require.NoError(t, os.Remove(e.v.path(rel)))
		}
	}
	assert.Equal(t, stagedBefore, escStaged(t, e.c.folder), "private temporary files are left")
}

// escStaged describes the views' private files under the folder's
// staging directory: path (below it) -> content digest.
func escStaged(t *testing.T, folder string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(folder, acpfsfs.StagingDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = escDigest(b)
		return nil
	})
	require.NoError(t, err)
	return out
}

func escDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func escValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// escNoHiddenWords fails if text names a hidden path.
func escNoHiddenWords(t *testing.T, text string) {
	t.Helper()
	for _, w := range escHiddenWords {
		assert.NotContains(t, text, w, "names a hidden path")
	}
}

func escHasRecord(recs []ledger.Record, w escRecord) bool {
	for _, r := range recs {
		if r.Kind == w.kind && (w.path == "" || r.Path == w.path) && (w.op == "" || string(r.Op) == w.op) &&
			strings.Contains(r.Detail, w.detail) {
			return true
		}
	}
	return false
}

func escFmtRecords(recs []ledger.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "\n  %s op=%s path=%q detail=%q", r.Kind, r.Op, r.Path, r.Detail)
	}
	if b.Len() == 0 {
		return "(none)"
	}
	return b.String()
}

func escLastError(t *testing.T, v *view) string {
	t.Helper()
	b, err := os.ReadFile(v.path(".acpfs/last-error"))
	require.NoError(t, err)
	return string(b)
}

// escTree describes every entry below dir, for before/after comparisons.
// The views' private files (dir/.acpfs-staging), which escStaged
// describes, and the appenders' lock (protocol.LockFile) are left out.
func escTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	syncFolder(t, dir)
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == acpfsfs.StagingDir && d.IsDir() {
			return filepath.SkipDir
		}
		if rel == protocol.LockFile {
			return nil // the appenders' lock, made by the first daemon or append
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o", st.Mode)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" size=%d mtime=%d sha=%s xattrs=%s", st.Size, st.Mtim.Nano(),
				hex.EncodeToString(sum[:8]), escXattrs(p))
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case unix.S_IFDIR:
			desc += " xattrs=" + escXattrs(p)
		}
		out[rel] = desc
		return nil
	})
	require.NoError(t, err)
	return out
}

func escXattrs(p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return ""
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	return strings.Join(names, ",")
}

func escRequireSameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	var diff []string
	for k, v := range before {
		if after[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %q -> %q", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: new %q", k, v))
		}
	}
	sort.Strings(diff)
	assert.Empty(t, diff, "the backing folder changed")
}

// escWithPassthrough mounts a view whose files the grant can only read
// are read by the kernel straight from the backing folder.
func escWithPassthrough() viewOpt { return func(c *mount.Config) { c.Passthrough = true } }

// escMount mounts g and returns it with the collaboration as an escEnv,
// with the owner's view as the other view.
func escMount(c *collab, g *grants.Grant) escEnv {
	require.NotEqual(c.t, owner, g.AgentID, "the other view is the owner's")
	return escEnv{c: c, v: c.mountView(g, withAuditOpens()), other: c.mountView(ownerGrant(), withAuditOpens())}
}

// escRec is the expected ledger record of an attempt.
func escRec(kind ledger.Kind, path, op string) *escRecord {
	return &escRecord{kind: kind, path: path, op: op}
}

// escRecD is escRec with a fragment the record's detail must hold.
func escRecD(kind ledger.Kind, path, op, detail string) *escRecord {
	return &escRecord{kind: kind, path: path, op: op, detail: detail}
}

// escConcealed is the quiet record of a lookup of a concealed entry.
func escConcealed(path, why string) *escRecord {
	return escRecD(ledger.KindDenied, path, "lookup", why)
}

// escAppend appends line through v with one write, as `echo >>` does.
func escAppend(v *view, line string) error {
	if errno := v.appendEvent(line); errno != 0 {
		return errno
	}
	return nil
}

// escOpen is os.OpenFile returning only the error, closing on success.
func escOpen(p string, flag int) error {
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// escWriteClose writes data to p opened with flag and returns the first
// error of open, write and close (a refusal at close is how protocol.json
// rewrites are judged).
func escWriteClose(p string, flag int, data []byte) error {
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// escGetdents lists dir with raw getdents64, as ls does.
func escGetdents(t *testing.T, dir string) []string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		require.NoError(t, err)
		if n == 0 {
			return names
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// escPython runs a Python program with args outside any view (the
// program opens view paths itself) and returns its combined output.
func escPython(t *testing.T, prog string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", prog}, args...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// escPlant creates files on the backing folder, as a careless
// coordinator or another process could.
func escPlant(t *testing.T, folder string, links map[string]string, files map[string]string, hard map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(folder, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	for name, target := range links {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(folder, name)), 0o755))
		require.NoError(t, os.Symlink(target, filepath.Join(folder, name)))
	}
	for name, src := range hard {
		require.NoError(t, os.Link(filepath.Join(folder, src), filepath.Join(folder, name)))
	}
}

func escReadErr(p string) error {
	b, err := os.ReadFile(p)
	if strings.Contains(string(b), escSecret) {
		return fmt.Errorf("leaked the oracle through %s", p)
	}
	if err == nil {
		return fmt.Errorf("read %s succeeded: %q", p, b)
	}
	return err
}

// escHandle builds a FUSE file handle (node id, generation) as the kernel
// encodes it (FILEID_INO64_GEN: three 32-bit words).
func escHandle(nodeID uint64, gen uint32) unix.FileHandle {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint32(b[0:], uint32(nodeID>>32))
	binary.LittleEndian.PutUint32(b[4:], uint32(nodeID))
	binary.LittleEndian.PutUint32(b[8:], gen)
	return unix.NewFileHandle(0x81, b)
}

func escOpenByHandle(mountDir string, h unix.FileHandle) error {
	mfd, err := unix.Open(mountDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// A file that opens but cannot be read (the grant changed, or the
	// view's connection is gone) is refused all the same: that error is
	// the answer, and read(2) returned no byte.
	b := make([]byte, 256)
	n, err := unix.Read(fd, b)
	if err != nil {
		return err
	}
	return fmt.Errorf("open_by_handle_at opened a file: %q", b[:n])
}

// escMapper is a separate process holding a shared writable mapping of a
// file in a view. Touching mapped memory of a file that this process
// serves would fault into its own FUSE server while the Go runtime may be
// stopping the world for a collection: a deadlock. The mapping therefore
// lives in another process, which writes and syncs it on request.
type escMapper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

const escMapperProg = `import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 64, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
print("ready", flush=True)
for line in sys.stdin:
    try:
        data = line.rstrip("\n").encode()
        m[0:len(data)] = data
        m.flush()
        print("ok", flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
`

func escMapFile(t *testing.T, path string) *escMapper {
	t.Helper()
	return escStartMapper(t, escMapperProg, path, false)
}

// escStartMapper runs a mapper program on path and waits until it has
// mapped the file. With kill, cleanup kills it (a mapping that faulted
// may leave it unable to read its input).
func escStartMapper(t *testing.T, prog, path string, kill bool) *escMapper {
	t.Helper()
	cmd := exec.Command("python3", "-c", prog, path)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	m := &escMapper{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		m.in.Close()
		if kill {
			_ = m.cmd.Process.Kill()
		}
		_ = m.cmd.Wait()
	})
	line, err := m.out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return m
}

// writeAndSync writes data at the start of the mapping and msyncs it,
// returning the errno the sync reported.
func (m *escMapper) writeAndSync(data string) error {
	if _, err := io.WriteString(m.in, data+"\n"); err != nil {
		return err
	}
	line, err := m.out.ReadString('\n')
	if err != nil {
		return err
	}
	var errno int
	if _, err := fmt.Sscanf(line, "errno %d", &errno); err == nil {
		return syscall.Errno(errno)
	}
	if line != "ok\n" {
		return fmt.Errorf("mapper: %q", line)
	}
	return nil
}

// escROMapperProg maps a file shared and read-only, and on each request
// prints the first bytes of the mapping (hex), or the errno of a failed
// read; a fault on the mapping (SIGBUS) ends the process.
const escROMapperProg = `import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
print("ready", flush=True)
for line in sys.stdin:
    try:
        print("data", m[0:64].hex(), flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
`

// escMapFileRO maps path shared and read-only in another process (see
// escMapper).
func escMapFileRO(t *testing.T, path string) *escMapper {
	t.Helper()
	return escStartMapper(t, escROMapperProg, path, true)
}

// readMapped returns the first bytes of a read-only mapping, or the
// error that reading it gave (io.EOF when the process died of it).
func (m *escMapper) readMapped() ([]byte, error) {
	if _, err := io.WriteString(m.in, "read\n"); err != nil {
		return nil, err
	}
	line, err := m.out.ReadString('\n')
	if err != nil {
		return nil, err
	}
	var errno int
	if _, err := fmt.Sscanf(line, "errno %d", &errno); err == nil {
		return nil, syscall.Errno(errno)
	}
	var h string
	if _, err := fmt.Sscanf(line, "data %s", &h); err != nil {
		return nil, fmt.Errorf("mapper: %q", line)
	}
	return hex.DecodeString(h)
}

// escMapShared is an attempt to map path shared and writable. It only
// asks for the mapping and never touches it (see escMapper).
func escMapShared(path string) func(*testing.T) error {
	return func(*testing.T) error {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		m, err := unix.Mmap(fd, 0, 64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err == nil {
			unix.Munmap(m)
		}
		return err
	}
}
