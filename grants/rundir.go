package grants

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/fsid"
)

// DefaultRunDirName is the run directory's name when none is given.
const DefaultRunDirName = "agent_runs"

// Names inside a run directory.
const (
	GrantsDirName    = "context_grants"
	HandoffsDirName  = "handoffs"
	ArtifactsDirName = "artifacts"
	LedgerFileName   = "communication_ledger.jsonl"
)

// LedgerKeyName is the ledger's private key file (ledger.KeyFile), kept
// in the ledger's directory.
const LedgerKeyName = "ledger.key"

// coordinatorMarks are the names that make the directory holding them a
// run directory or a ledger's directory: no view shows such a directory,
// whatever it is called, wherever it lies and whoever's it is, and no
// view lets an agent make an entry of one of these names.
var coordinatorMarks = [...]string{GrantsDirName, LedgerKeyName, LedgerFileName}

// IsReservedName reports whether base is a name only a coordinator makes
// (see IsCoordinatorDirAt).
func IsReservedName(base string) bool {
	for _, m := range coordinatorMarks {
		if base == m {
			return true
		}
	}
	return false
}

// IsCoordinatorDirAt reports whether the directory name in dirfd is a
// run directory or a ledger's directory: it holds context_grants/,
// ledger.key or communication_ledger.jsonl. No symlink is followed:
// name is opened with O_NOFOLLOW and its entries are looked at from it.
// A directory that cannot be opened counts as one (it is hidden).
func IsCoordinatorDirAt(dirfd int, name string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Gone, or swapped for something that is not a directory:
		// what was judged is not there any more.
		return !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP)
	}
	defer unix.Close(fd)
	return IsCoordinatorDir(fd)
}

// IsCoordinatorDir is IsCoordinatorDirAt for a directory held by fd.
func IsCoordinatorDir(fd int) bool {
	var st unix.Stat_t
	for _, m := range coordinatorMarks {
		if unix.Fstatat(fd, m, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return true
		}
	}
	return false
}

// IsGitDirAt reports whether the directory name in dirfd is a git
// repository's directory, whatever it is called (a bare repository, a
// separate git directory, a copy): it holds a HEAD file and objects/ and
// refs/ directories. No symlink is followed.
func IsGitDirAt(dirfd int, name string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return IsGitDir(fd)
}

// gitHead and gitParts are what makes a directory a git directory: a
// HEAD and one of the parts (see IsGitDir).
const gitHead = "HEAD"

var gitParts = [...]string{"objects", "refs", "commondir", "packed-refs"}

// IsGitDir is IsGitDirAt for a directory held by fd. Its parts may be of
// any type (a symlinked objects/ or HEAD leads git as well), and a
// worktree's git directory (HEAD and commondir) counts too.
func IsGitDir(fd int) bool {
	var st unix.Stat_t
	if unix.Fstatat(fd, gitHead, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	for _, d := range gitParts {
		if unix.Fstatat(fd, d, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return true
		}
	}
	return false
}

// MarksDir reports whether an entry named base, made, removed or renamed,
// can change what the directory holding it is to a view: a run or ledger
// directory (IsCoordinatorDir) or a git directory (IsGitDir), whatever
// the entry's type. A watcher drops what it knew of that directory then.
func MarksDir(base string) bool {
	if base == gitHead || IsReservedName(base) {
		return true
	}
	for _, d := range gitParts {
		if base == d {
			return true
		}
	}
	return false
}

// IsRunDirPart reports whether the directory held by fd looks like a
// part of a run directory reached under another name (a bind mount of
// another coordinator's context_grants, handoffs or artifacts): it holds
// a grant file with its prompt, a handoff record, or a content-addressed
// artifact copy. It reads the directory, so it is for checks made once
// (a folder or a sandbox's directories at start), not for every lookup.
func IsRunDirPart(fd int) bool {
	dup, err := unix.Dup(fd)
	if err != nil {
		return false
	}
	// An O_PATH descriptor cannot be listed: open the directory itself.
	dfd, err := unix.Openat(dup, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(dup)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(dfd), "part")
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "G-") && strings.HasSuffix(n, ".json") && have[strings.TrimSuffix(n, ".json")+".prompt.md"]:
			return true
		case strings.HasPrefix(n, "H-") && strings.HasSuffix(n, ".json"):
			return true
		case len(n) == 64 && strings.Trim(n, "0123456789abcdef") == "":
			// A handed-over copy is read-only for everyone (0444).
			var st unix.Stat_t
			if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o777 == 0o444 {
				return true
			}
		}
	}
	return false
}

// RunDir is the coordinator's run directory:
//
//	<root>/context_grants/G-<id>.json and G-<id>.prompt.md
//	<root>/handoffs/H-<id>.json
//	<root>/communication_ledger.jsonl
//	<root>/artifacts/<sha256>   content-addressed handoff copies, mode 0444
//
// It is never visible inside a mount (see HiddenIn).
type RunDir struct {
	Root string
}

// NewRunDir returns the run directory at root ("" means ./agent_runs).
func NewRunDir(root string) RunDir {
	if root == "" {
		root = DefaultRunDirName
	}
	return RunDir{Root: root}
}

// GrantsDir is <root>/context_grants.
func (r RunDir) GrantsDir() string { return filepath.Join(r.Root, GrantsDirName) }

// HandoffsDir is <root>/handoffs.
func (r RunDir) HandoffsDir() string { return filepath.Join(r.Root, HandoffsDirName) }

// ArtifactsDir is <root>/artifacts.
func (r RunDir) ArtifactsDir() string { return filepath.Join(r.Root, ArtifactsDirName) }

// LedgerPath is <root>/communication_ledger.jsonl.
func (r RunDir) LedgerPath() string { return filepath.Join(r.Root, LedgerFileName) }

// GrantPath is the JSON file of grant id.
func (r RunDir) GrantPath(id string) string { return filepath.Join(r.GrantsDir(), id+".json") }

// PromptPath is the rendered prompt of grant id.
func (r RunDir) PromptPath(id string) string { return filepath.Join(r.GrantsDir(), id+".prompt.md") }

// HandoffPath is the JSON file of handoff id.
func (r RunDir) HandoffPath(id string) string { return filepath.Join(r.HandoffsDir(), id+".json") }

// ArtifactPath is the stored copy of the content with this SHA-256.
func (r RunDir) ArtifactPath(sha string) string { return filepath.Join(r.ArtifactsDir(), sha) }

// Init creates the run directory and its subdirectories.
func (r RunDir) Init() error {
	if err := r.MakeRoot(); err != nil {
		return fmt.Errorf("init run directory: %w", err)
	}
	if err := r.checkParts(); err != nil {
		return fmt.Errorf("init run directory: %w", err)
	}
	for _, d := range []string{r.GrantsDir(), r.HandoffsDir(), r.ArtifactsDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("init run directory: %w", err)
		}
	}
	return nil
}

// checkParts refuses a run directory whose grants, handoffs or artifacts
// directory is a symlink: what acpfs writes there (grants, prompts, the
// copies handed over, the oracle's among them) would land wherever it
// leads, the collaboration folder included, under names no view
// conceals.
func (r RunDir) checkParts() error {
	for _, d := range []string{r.GrantsDir(), r.HandoffsDir(), r.ArtifactsDir()} {
		fi, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory of the run directory's own (a symlink leads elsewhere, the collaboration folder perhaps): make it a plain directory", d)
		}
	}
	return nil
}

// HiddenIn returns the folder-relative path of the run directory when it
// lies inside folder (for MatcherOptions.Hidden), or nil. It is found by
// identity (device and inode), so any spelling of either path (a
// symlink, a relative path, a bind mount) gives the same answer.
func (r RunDir) HiddenIn(folder string) ([]string, error) {
	if same, err := sameDir(folder, r.Root); err != nil {
		return nil, err
	} else if same {
		return nil, fmt.Errorf("run directory %s is the collaboration folder itself", r.Root)
	}
	if _, err := os.Stat(r.Root); errors.Is(err, os.ErrNotExist) {
		return r.hiddenByPath(folder)
	}
	found, err := fsid.LocateIn(folder, []string{r.Root})
	if err != nil {
		return nil, fmt.Errorf("locate run directory: %w", err)
	}
	if len(found) == 0 {
		return nil, nil
	}
	return []string{found[0].Rel}, nil
}

// hiddenByPath places a run directory that does not exist yet by its
// path, symlinks resolved as far as it exists.
func (r RunDir) hiddenByPath(folder string) ([]string, error) {
	f, err := realAbs(folder)
	if err != nil {
		return nil, fmt.Errorf("resolve folder: %w", err)
	}
	d, err := realAbs(r.Root)
	if err != nil {
		return nil, fmt.Errorf("resolve run directory: %w", err)
	}
	rel, err := filepath.Rel(f, d)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || rel == "." {
		return nil, nil
	}
	return []string{filepath.ToSlash(rel)}, nil
}

// sameDir reports whether a and b are the same directory; a run directory
// that does not exist yet is not the folder.
func sameDir(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, fmt.Errorf("resolve folder: %w", err)
	}
	sb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("resolve run directory: %w", err)
	}
	return os.SameFile(sa, sb), nil
}

// GrantFile is a grant together with the file it was loaded from.
type GrantFile struct {
	Path  string
	Grant *Grant
}

// LoadGrants loads every context_grants/G-*.json, sorted by grant id. It
// validates each grant and the set: a file must be named after its
// grant_id, a grant id must be unique, and an agent may hold at most one
// active (not revoked) grant. Grants that load are returned even when the
// error (every problem, joined) is not nil. A missing directory is an
// empty set.
func (r RunDir) LoadGrants() ([]GrantFile, error) {
	entries, err := os.ReadDir(r.GrantsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list grants: %w", err)
	}
	var out []GrantFile
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !isGrantFileName(name) || e.IsDir() {
			continue
		}
		p := filepath.Join(r.GrantsDir(), name)
		if !e.Type().IsRegular() {
			// A symlink could lead to a file an agent may write (one
			// in the folder): the grant would be the agent's to set.
			errs = append(errs, fmt.Errorf("%s: not a regular file (a grant in the run directory must be a file of its own, not a symlink)", p))
			continue
		}
		g, err := Load(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if want := g.GrantID + ".json"; name != want {
			errs = append(errs, fmt.Errorf("%s: holds grant_id %q, so it must be named %s", p, g.GrantID, want))
		}
		out = append(out, GrantFile{Path: p, Grant: g})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Grant.GrantID != out[j].Grant.GrantID {
			return out[i].Grant.GrantID < out[j].Grant.GrantID
		}
		return out[i].Path < out[j].Path
	})
	errs = append(errs, CheckSet(out)...)
	return out, errors.Join(errs...)
}

// isGrantFileName selects G-*.json, leaving out prompts and the
// temporary files of an atomic save (which start with a dot).
func isGrantFileName(name string) bool {
	return strings.HasPrefix(name, "G-") && strings.HasSuffix(name, ".json")
}

// CheckSet applies the set-level rules to grants loaded from one run
// directory: unique grant ids, and at most one active grant per agent.
func CheckSet(gs []GrantFile) []error {
	var errs []error
	byID := map[string]string{}
	activeBy := map[string]string{}
	for _, gf := range gs {
		g := gf.Grant
		if prev, ok := byID[g.GrantID]; ok {
			errs = append(errs, fmt.Errorf("duplicate grant id %s in %s and %s", g.GrantID, prev, gf.Path))
		} else {
			byID[g.GrantID] = gf.Path
		}
		if g.Revoked {
			continue
		}
		if prev, ok := activeBy[g.AgentID]; ok {
			errs = append(errs, fmt.Errorf("agent %q has two active grants: %s and %s (revoke one)", g.AgentID, prev, gf.Path))
		} else {
			activeBy[g.AgentID] = gf.Path
		}
	}
	return errs
}

// FindGrant loads one grant given a reference (see Resolve): the path of
// its file (a reference holding a path separator or ending in .json), its
// id ("G-bob-2", or "bob-2"), or an agent's name ("bob": that agent's
// active grant, whatever its id). A reference that names no grant is an
// error that lists the grants the run directory holds; it wraps
// fs.ErrNotExist.
func (r RunDir) FindGrant(ref string) (*Grant, string, error) {
	p, err := r.ResolveGrant(ref)
	if err != nil {
		return nil, p, err
	}
	g, err := Load(p)
	if err != nil {
		return nil, p, err
	}
	return g, p, nil
}

// ResolveGrant turns a grant reference (see FindGrant) into the path of
// its file, checking that the file exists.
func (r RunDir) ResolveGrant(ref string) (string, error) {
	if ref == "" {
		return "", errors.New("no grant given: name one by its agent, its id (G-<id>) or its file")
	}
	if IsGrantFileRef(ref) {
		if _, err := os.Stat(ref); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return ref, &fs.PathError{Op: "open grant file", Path: ref, Err: err}
		}
		return ref, nil
	}
	id := NormalizeGrantID(ref)
	if err := CheckID(id, "G"); err != nil {
		return "", fmt.Errorf("grant %q is neither a grant id nor a file: %w", ref, err)
	}
	// Grants that do not load are left out of the set; the exact id's
	// file is still found below, so that loading it says what is wrong.
	gs, _ := r.LoadGrants()
	gf, err := Resolve(gs, ref)
	var nf *NoGrantError
	switch {
	case err == nil:
		return gf.Path, nil
	case !errors.As(err, &nf):
		return "", err
	}
	p := r.GrantPath(id)
	if _, statErr := os.Stat(p); statErr == nil {
		return p, nil
	} else if !errors.Is(statErr, fs.ErrNotExist) {
		return p, fmt.Errorf("grant %s: %w", id, statErr)
	}
	_, dirErr := os.Stat(r.GrantsDir())
	nf.Runs, nf.NoDir = r.Root, errors.Is(dirErr, fs.ErrNotExist)
	return p, nf
}

// IsGrantFileRef reports whether a grant reference is the path of a grant
// file rather than a name: it holds a path separator or ends in .json.
func IsGrantFileRef(ref string) bool {
	return strings.ContainsRune(ref, os.PathSeparator) || strings.HasSuffix(ref, ".json")
}

// Resolve picks the grant that ref names among gs, the grants of one run
// directory. A grant has several names, and each is accepted:
//
//   - its id, "G-bob-2": that grant, revoked or not;
//   - its id without the prefix, "bob-2";
//   - its agent's name, "bob": the agent's active grant, whatever its id
//     (G-bob-2 once G-bob is revoked); with no active grant, the grant
//     whose id it abbreviates (G-bob).
//
// A name that could mean two grants (an agent with two active grants, or
// an agent's name that is another agent's grant id without its prefix)
// is an *AmbiguousGrantError listing them; a name that means none is a
// *NoGrantError listing the grants there are. File paths are the run
// directory's business (RunDir.ResolveGrant).
func Resolve(gs []GrantFile, ref string) (GrantFile, error) {
	id := NormalizeGrantID(ref)
	byID := -1
	for i, gf := range gs {
		if gf.Grant.GrantID == id {
			byID = i
			break
		}
	}
	if !strings.HasPrefix(ref, "G-") {
		var active []GrantFile
		for _, gf := range gs {
			if gf.Grant.AgentID == ref && !gf.Grant.Revoked {
				active = append(active, gf)
			}
		}
		switch {
		case len(active) > 1:
			return GrantFile{}, &AmbiguousGrantError{Ref: ref, Candidates: grantIDs(active), Why: "agent " + ref + " holds several active grants"}
		case len(active) == 1 && byID >= 0 && gs[byID].Grant.AgentID != ref:
			other := gs[byID].Grant
			return GrantFile{}, &AmbiguousGrantError{Ref: ref, Candidates: []string{active[0].Grant.GrantID, other.GrantID},
				Why: fmt.Sprintf("%s is agent %s's active grant and %s is a grant of agent %s", active[0].Grant.GrantID, ref, other.GrantID, other.AgentID)}
		case len(active) == 1:
			return active[0], nil
		}
	}
	if byID >= 0 {
		return gs[byID], nil
	}
	return GrantFile{}, &NoGrantError{ID: id, Known: knownGrants(gs)}
}

// knownGrants describes each grant for a not-found error: its id, its
// agent and, when revoked, that it is.
func knownGrants(gs []GrantFile) []string {
	out := make([]string, 0, len(gs))
	for _, gf := range gs {
		d := gf.Grant.GrantID + " (" + gf.Grant.AgentID
		if gf.Grant.Revoked {
			d += ", revoked"
		}
		out = append(out, d+")")
	}
	return out
}

func grantIDs(gs []GrantFile) []string {
	out := make([]string, len(gs))
	for i, gf := range gs {
		out[i] = gf.Grant.GrantID
	}
	return out
}

// AmbiguousGrantError is a grant reference that names more than one grant.
type AmbiguousGrantError struct {
	Ref        string
	Candidates []string
	Why        string
}

func (e *AmbiguousGrantError) Error() string {
	return fmt.Sprintf("grant %q is ambiguous (%s): name one of %s", e.Ref, e.Why, strings.Join(e.Candidates, ", "))
}

// NoGrantError is a grant reference that names no grant of the run
// directory.
type NoGrantError struct {
	ID    string   // the grant id looked for
	Runs  string   // the run directory ("" when only a set was searched)
	NoDir bool     // the run directory has no context_grants/ at all
	Known []string // the grants there are, as "G-bob (bob)"
}

func (e *NoGrantError) Error() string {
	if e.Runs == "" {
		return fmt.Sprintf("grant %s not found: %s", e.ID, e.known())
	}
	dir := filepath.Join(e.Runs, GrantsDirName)
	if e.NoDir {
		return fmt.Sprintf("grant %s not found: %s does not exist (is %s the run directory? "+
			"\"acpfs grant list --runs DIR\" lists the grants of run directory DIR)", e.ID, dir, e.Runs)
	}
	return fmt.Sprintf("grant %s not found in %s: %s (\"acpfs grant list --runs %s\" shows them)",
		e.ID, dir, e.known(), shellQuote(e.Runs))
}

// known lists the grants there are, for the reader to pick from.
func (e *NoGrantError) known() string {
	if len(e.Known) == 0 {
		return "there is no grant"
	}
	return "the grants are " + strings.Join(e.Known, ", ")
}

// Unwrap makes errors.Is(err, fs.ErrNotExist) true.
func (e *NoGrantError) Unwrap() error { return fs.ErrNotExist }

// shellQuote quotes s for a POSIX shell when it holds anything but
// characters that need no quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c < 0x80 && (isAlnum(byte(c)) || strings.ContainsRune("-_./+:=@%,", c)))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ActiveGrantFor returns the agent's active grant, if any.
func ActiveGrantFor(gs []GrantFile, agentID string) (GrantFile, bool) {
	for _, gf := range gs {
		if gf.Grant.AgentID == agentID && !gf.Grant.Revoked {
			return gf, true
		}
	}
	return GrantFile{}, false
}

// SaveGrant validates g and writes its prompt and then its JSON file,
// each through a temporary file and a rename, so that a watcher never
// sees a half-written grant and a grant file never lacks its prompt.
func (r RunDir) SaveGrant(g *Grant) error {
	if err := Validate(g); err != nil {
		return err
	}
	if err := r.checkParts(); err != nil {
		return fmt.Errorf("save grant %s: %w", g.GrantID, err)
	}
	if err := r.MakeRoot(); err != nil {
		return fmt.Errorf("save grant %s: %w", g.GrantID, err)
	}
	if err := os.MkdirAll(r.GrantsDir(), 0o755); err != nil {
		return fmt.Errorf("save grant %s: %w", g.GrantID, err)
	}
	data, err := marshalIndent(g)
	if err != nil {
		return fmt.Errorf("save grant %s: %w", g.GrantID, err)
	}
	if err := writeFileAtomic(r.PromptPath(g.GrantID), []byte(Render(g)), 0o644); err != nil {
		return fmt.Errorf("save grant %s prompt: %w", g.GrantID, err)
	}
	if err := writeFileAtomic(r.GrantPath(g.GrantID), data, 0o644); err != nil {
		return fmt.Errorf("save grant %s: %w", g.GrantID, err)
	}
	return nil
}

// realAbs makes p absolute and resolves symbolic links in the part of it
// that exists (the run directory may not exist yet).
func realAbs(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for cur := abs; ; {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// MakeRoot creates the run directory, when it does not exist, accessible
// to its owner only (0700): it holds the grants, the coordinator's lock
// and often the ledger's key, none of which another uid may open (a
// lock another uid can open is a lock it can hold). An existing run
// directory keeps its mode here; the commands that use one make it
// private first (Tighten).
func (r RunDir) MakeRoot() error {
	if err := os.MkdirAll(filepath.Dir(r.Root), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(r.Root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// Tighten makes an existing run directory that the caller owns private
// (0700): one an older acpfs made, or someone made by hand, with the
// default 0755 lets every uid read its grants and open the coordinator's
// lock. It returns the mode it had when it changed it. A directory of
// another owner, or one that does not exist, is left alone.
func (r RunDir) Tighten() (old fs.FileMode, changed bool, err error) {
	fd, err := unix.Open(r.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, false, nil
		}
		return 0, false, &os.PathError{Op: "open", Path: r.Root, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, false, &os.PathError{Op: "stat", Path: r.Root, Err: err}
	}
	old = fs.FileMode(st.Mode & 0o777)
	if int(st.Uid) != os.Geteuid() || st.Mode&0o077 == 0 {
		return old, false, nil
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return old, false, &os.PathError{Op: "chmod", Path: r.Root, Err: err}
	}
	return old, true, nil
}

// CoordinatorDirAt returns the run or ledger directory that p is, or lies
// in (walking up through ".." from what p leads to), or "" for none: a
// collaboration folder, or a directory shown to a sandbox, inside one
// would show its key, its grants and its agents' homes.
func CoordinatorDirAt(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	where := p
	for depth := 0; depth < 4096; depth++ {
		// A part of a run directory is recognised where p itself leads
		// (a bind mount of one hides the run directory above it).
		if IsCoordinatorDir(fd) || depth == 0 && IsRunDirPart(fd) {
			unix.Close(fd)
			return where, nil
		}
		parent, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		var a, b unix.Stat_t
		same := err == nil && unix.Fstat(fd, &a) == nil && unix.Fstat(parent, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
		unix.Close(fd)
		if err != nil {
			return "", err
		}
		if same {
			unix.Close(parent)
			return "", nil
		}
		fd, where = parent, filepath.Join(where, "..")
	}
	unix.Close(fd)
	return "", nil
}

// CoordinatorDirBelow returns a run or ledger directory found at or
// below the directory p (directories only are walked, at most maxDirs of
// them, symlinks not followed), or "" for none; the directories except
// names are not looked into (the caller masks them). complete is false
// when the walk stopped at maxDirs.
func CoordinatorDirBelow(p string, maxDirs int, except ...string) (found string, complete bool, err error) {
	skip := map[[2]uint64]bool{}
	for _, e := range except {
		var st unix.Stat_t
		if unix.Stat(e, &st) == nil {
			skip[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", false, err
	}
	if !fi.IsDir() {
		return "", true, nil
	}
	queue := []string{p}
	for n := 0; len(queue) > 0; n++ {
		if n >= maxDirs {
			return "", false, nil
		}
		d := queue[0]
		queue = queue[1:]
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // unreadable or gone: what the agent cannot read either
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && skip[[2]uint64{st.Dev, st.Ino}] {
			unix.Close(fd) // masked by the caller
			continue
		}
		if IsCoordinatorDir(fd) || IsRunDirPart(fd) {
			unix.Close(fd)
			return d, true, nil
		}
		f := os.NewFile(uintptr(fd), d)
		ents, _ := f.ReadDir(-1)
		f.Close()
		for _, e := range ents {
			if e.IsDir() {
				queue = append(queue, filepath.Join(d, e.Name()))
			}
		}
	}
	return "", true, nil
}

// RunDirOfGrant returns the run directory whose context_grants holds the
// grant file p, found by what the file's directory is on disk rather
// than by how p spells it: the directory holding that directory (its
// "..", opened from its descriptor) is a run directory when its
// context_grants entry is that very directory. A symlink to
// context_grants, or one named otherwise, leads to the same run
// directory. It returns "" when the grant's directory is not a run
// directory's context_grants.
func RunDirOfGrant(p string) (string, error) {
	dir, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: filepath.Dir(p), Err: err}
	}
	defer unix.Close(dir)
	parent, err := unix.Openat(dir, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: filepath.Join(filepath.Dir(p), ".."), Err: err}
	}
	defer unix.Close(parent)
	var d, g unix.Stat_t
	if err := unix.Fstat(dir, &d); err != nil {
		return "", err
	}
	if unix.Fstatat(parent, GrantsDirName, &g, unix.AT_SYMLINK_NOFOLLOW) != nil || fsid.OfStat(&d) != fsid.OfStat(&g) {
		return "", nil
	}
	// The path the kernel knows the descriptor by: a directory that is
	// renamed later is still held by identity by whoever holds it.
	where, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", parent))
	if err != nil {
		return "", fmt.Errorf("run directory of %s: %w", p, err)
	}
	return where, nil
}
