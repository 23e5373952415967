package grants

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/protocol"
)

// HandoffArtifact records one file passed from a producer agent to a
// consumer agent. The consumer reads the content-addressed copy stored
// under artifacts/<artifact_sha256>: exactly the bytes handed over, even
// if the original changes later.
type HandoffArtifact struct {
	HandoffID               string `json:"handoff_id"`
	ProducerAgentID         string `json:"producer_agent_id"`
	ConsumerAgentID         string `json:"consumer_agent_id"`
	ArtifactPath            string `json:"artifact_path"` // folder-relative
	ArtifactSHA256          string `json:"artifact_sha256"`
	ArtifactType            string `json:"artifact_type,omitempty"`
	NonAuthoritativeSummary string `json:"non_authoritative_summary,omitempty"`
	RequiredConsumerAction  string `json:"required_consumer_action,omitempty"`
	SourceGrantID           string `json:"source_grant_id"`
	TargetGrantID           string `json:"target_grant_id"`
	CreatedAt               string `json:"created_at"`
	// Supersedes is the handoff this one replaced: the current handoff of
	// the same artifact path to the same consumer agent when this one was
	// created ("" for the first). See ResolveHandoffs.
	Supersedes string `json:"supersedes,omitempty"`
}

// HandoffRequest describes a handoff to create.
type HandoffRequest struct {
	ID           string // "H-<id>"; generated when empty
	Folder       string // the collaboration folder on disk
	Source       *Grant // the producer's grant: it must be able to read the artifact
	Target       *Grant // the consumer's grant
	ArtifactPath string // folder-relative path of the file handed over
	Type         string // artifact_type
	Summary      string // non_authoritative_summary
	Action       string // required_consumer_action
	Now          time.Time
}

// CreateHandoff checks that the source grant can read the artifact,
// stores a read-only content-addressed copy of it under artifacts/ and
// writes handoffs/H-<id>.json. It refuses revoked grants, paths outside
// the folder, symbolic links and anything but a regular file.
//
// A handoff of a path that was already handed to the same consumer agent
// supersedes the current one: its Supersedes names it, and from then on
// only the new one is current (shown in the consumer's view, checked by
// verify). Creations are serialized by a lock on the handoffs directory,
// so two concurrent handoffs of one path to one agent form a chain.
func (r RunDir) CreateHandoff(req HandoffRequest) (*HandoffArtifact, error) {
	h, in, err := r.prepareHandoff(req)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	if err := r.Init(); err != nil {
		return nil, err
	}
	unlock, err := r.lockHandoffs()
	if err != nil {
		return nil, fmt.Errorf("handoff %s: %w", h.HandoffID, err)
	}
	defer unlock()
	if _, err := os.Lstat(r.HandoffPath(h.HandoffID)); err == nil {
		return nil, fmt.Errorf("handoff %s already exists", h.HandoffID)
	}
	// A record that does not load cannot be current, so load errors do
	// not stop a new handoff.
	all, _ := r.LoadHandoffs()
	for _, st := range ResolveHandoffs(all) {
		if st.Current() && sameHandoffTarget(st.Handoff, h) {
			h.Supersedes = st.Handoff.HandoffID
		}
	}
	sum, err := r.storeArtifact(in)
	if err != nil {
		return nil, fmt.Errorf("handoff %s: store %s: %w", h.HandoffID, h.ArtifactPath, err)
	}
	h.ArtifactSHA256 = sum
	data, err := marshalIndent(h)
	if err != nil {
		return nil, fmt.Errorf("handoff %s: %w", h.HandoffID, err)
	}
	if err := writeFileAtomic(r.HandoffPath(h.HandoffID), data, 0o644); err != nil {
		return nil, fmt.Errorf("handoff %s: %w", h.HandoffID, err)
	}
	return h, nil
}

// prepareHandoff validates the request and returns the record (without
// its hash) and the artifact, open.
func (r RunDir) prepareHandoff(req HandoffRequest) (*HandoffArtifact, *os.File, error) {
	src, dst := req.Source, req.Target
	if src == nil || dst == nil {
		return nil, nil, errors.New("handoff: source and target grants are required")
	}
	for _, g := range []*Grant{src, dst} {
		if g.Revoked {
			return nil, nil, fmt.Errorf("handoff: grant %s is revoked", g.GrantID)
		}
	}
	id := req.ID
	if id == "" {
		id = NewID("H", src.AgentID+"-to-"+dst.AgentID)
	}
	if err := CheckID(id, "H"); err != nil {
		return nil, nil, fmt.Errorf("handoff id: %w", err)
	}
	rel, err := cleanRel(filepath.ToSlash(req.ArtifactPath))
	if err != nil || rel == "" {
		if err == nil {
			err = errRootOnly
		}
		return nil, nil, fmt.Errorf("handoff artifact path %q: %w", req.ArtifactPath, err)
	}
	hidden, err := r.HiddenIn(req.Folder)
	if err != nil {
		return nil, nil, fmt.Errorf("handoff: %w", err)
	}
	m, err := Compile(src, MatcherOptions{Hidden: hidden})
	if err != nil {
		return nil, nil, fmt.Errorf("handoff: %w", err)
	}
	if !m.Readable(rel) {
		return nil, nil, fmt.Errorf("handoff: grant %s (agent %s) may not read %s, so it cannot hand it over (%s)",
			src.GrantID, src.AgentID, rel, m.Explain(rel).Rule)
	}
	in, err := openArtifact(req.Folder, rel)
	if err != nil {
		return nil, nil, fmt.Errorf("handoff: %w", err)
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	return &HandoffArtifact{
		HandoffID:               id,
		ProducerAgentID:         src.AgentID,
		ConsumerAgentID:         dst.AgentID,
		ArtifactPath:            rel,
		ArtifactType:            req.Type,
		NonAuthoritativeSummary: req.Summary,
		RequiredConsumerAction:  req.Action,
		SourceGrantID:           src.GrantID,
		TargetGrantID:           dst.GrantID,
		CreatedAt:               now.UTC().Format(time.RFC3339),
	}, in, nil
}

// openArtifact opens folder/rel for reading without following any
// symlink on the way (the folder is written by agents, and a handoff is
// made with the coordinator's rights), and checks that it is a regular
// file with a single name: another name could be one the producer's
// grant hides.
func openArtifact(folder, rel string) (*os.File, error) {
	root, err := unix.Open(folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open folder: %w", err)
	}
	defer unix.Close(root)
	fd, err := safeio.OpenBeneath(root, rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case err == unix.ELOOP || err == unix.EXDEV:
		return nil, fmt.Errorf("artifact %s: a symlink or a mount point is on the way; hand over the file itself", rel)
	case err != nil:
		return nil, fmt.Errorf("artifact %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("artifact %s: %w", rel, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.IsDir():
		err = fmt.Errorf("artifact %s is a directory; hand over files one by one", rel)
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("artifact %s is not a regular file", rel)
	case st != nil && st.Nlink > 1:
		err = fmt.Errorf("artifact %s has several names (hard links), which may be hidden from its producer; copy it first", rel)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// storeArtifact copies src to artifacts/<sha256> (mode 0444) while hashing
// it, and returns the hash. An intact existing copy is kept; a corrupted
// one is replaced.
func (r RunDir) storeArtifact(in *os.File) (string, error) {
	// The name comes from the content, so the copy is made under a
	// placeholder and installed once it is hashed.
	tmp, err := atomicfile.NewTemp(r.ArtifactsDir(), "incoming")
	if err != nil {
		return "", err
	}
	defer tmp.Discard()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		return "", err
	}
	if err := tmp.Finish(0o444); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	dst := r.ArtifactPath(sum)
	if got, err := digest.File(dst); err == nil && got == sum {
		return sum, nil
	}
	return sum, tmp.Install(dst)
}

// ParseHandoff decodes and checks a handoff record (unknown fields are an
// error).
func ParseHandoff(data []byte) (*HandoffArtifact, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var h HandoffArtifact
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("decode handoff: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("decode handoff: unexpected data after the handoff object")
	}
	var problems []string
	if err := CheckID(h.HandoffID, "H"); err != nil {
		problems = append(problems, "handoff_id: "+err.Error())
	}
	for _, f := range []struct{ name, val string }{
		{"producer_agent_id", h.ProducerAgentID}, {"consumer_agent_id", h.ConsumerAgentID},
		{"artifact_path", h.ArtifactPath}, {"source_grant_id", h.SourceGrantID}, {"target_grant_id", h.TargetGrantID},
	} {
		if f.val == "" {
			problems = append(problems, f.name+": missing")
		}
	}
	if !protocol.IsSHA256(h.ArtifactSHA256) {
		problems = append(problems, fmt.Sprintf("artifact_sha256: %q is not 64 lowercase hex digits", h.ArtifactSHA256))
	}
	if rel, err := cleanRel(h.ArtifactPath); err != nil || rel != h.ArtifactPath {
		problems = append(problems, fmt.Sprintf("artifact_path: %q is not a clean folder-relative path", h.ArtifactPath))
	}
	if h.Supersedes != "" {
		if err := CheckID(h.Supersedes, "H"); err != nil {
			problems = append(problems, "supersedes: "+err.Error())
		} else if h.Supersedes == h.HandoffID {
			problems = append(problems, "supersedes: a handoff cannot supersede itself")
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("invalid handoff %s: %s", h.HandoffID, strings.Join(problems, "; "))
	}
	return &h, nil
}

// LoadHandoff reads and checks one handoff file.
func LoadHandoff(path string) (*HandoffArtifact, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load handoff: %w", err)
	}
	h, err := ParseHandoff(data)
	if err != nil {
		return nil, fmt.Errorf("load handoff %s: %w", path, err)
	}
	return h, nil
}

// LoadHandoffs loads every handoffs/H-*.json, sorted by creation time and
// id. Handoffs that load are returned even when the error is not nil.
func (r RunDir) LoadHandoffs() ([]*HandoffArtifact, error) {
	entries, err := os.ReadDir(r.HandoffsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list handoffs: %w", err)
	}
	var out []*HandoffArtifact
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, "H-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		p := filepath.Join(r.HandoffsDir(), name)
		h, err := LoadHandoff(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if name != h.HandoffID+".json" {
			errs = append(errs, fmt.Errorf("%s: holds handoff_id %q, so it must be named %s.json", p, h.HandoffID, h.HandoffID))
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].HandoffID < out[j].HandoffID
	})
	return out, errors.Join(errs...)
}

// FindHandoff loads one handoff given its id ("H-x") or the path of its
// file.
func (r RunDir) FindHandoff(ref string) (*HandoffArtifact, error) {
	p := ref
	if !strings.ContainsRune(ref, os.PathSeparator) && !strings.HasSuffix(ref, ".json") {
		if err := CheckID(ref, "H"); err != nil {
			return nil, fmt.Errorf("handoff %q is neither a handoff id nor a file: %w", ref, err)
		}
		p = r.HandoffPath(ref)
	}
	return LoadHandoff(p)
}

// HandoffsFor returns the current handoffs addressed to a consumer:
// those whose target_grant_id is grantID or whose consumer_agent_id is
// agentID (so an agent whose grant was replaced still sees what was
// handed to it), without the superseded ones (see ResolveHandoffs), so
// each artifact path appears at most once per agent. Pass "" to leave
// either criterion out. The filesystem shows the consumer the stored
// copies of these artifacts.
func (r RunDir) HandoffsFor(grantID, agentID string) ([]*HandoffArtifact, error) {
	all, err := r.LoadHandoffs()
	var out []*HandoffArtifact
	for _, h := range CurrentHandoffs(all) {
		if (grantID != "" && h.TargetGrantID == grantID) || (agentID != "" && h.ConsumerAgentID == agentID) {
			out = append(out, h)
		}
	}
	return out, err
}

// sameHandoffTarget reports whether two handoffs hand the same path to
// the same consumer agent, so that the newer supersedes the older.
func sameHandoffTarget(a, b *HandoffArtifact) bool {
	return a.ConsumerAgentID == b.ConsumerAgentID && a.ArtifactPath == b.ArtifactPath
}

// HandoffState is a handoff with its place among the handoffs of the same
// artifact path to the same consumer agent: exactly one of them is
// current, the others were superseded.
type HandoffState struct {
	Handoff *HandoffArtifact
	// SupersededBy is the handoff that replaced this one; "" when this
	// one is current.
	SupersededBy string
	// Replaced lists, for a current handoff, every handoff of the same
	// path to the same agent that it superseded, directly or through
	// earlier ones, newest first.
	Replaced []string
}

// Current reports whether the handoff is the one in force.
func (s HandoffState) Current() bool { return s.SupersededBy == "" }

// ResolveHandoffs tells, for handoffs as LoadHandoffs returns them
// (sorted by creation time and id), which one is current for each
// (consumer agent, artifact path) and what each one superseded. The
// supersedes links written by CreateHandoff decide: a handoff named by a
// later one of the same path and agent is superseded by it. When several
// remain (records written before supersedes existed, or edited by hand),
// the latest by creation time and id is current and the others count as
// superseded by it. The result is in the order of hs.
func ResolveHandoffs(hs []*HandoffArtifact) []HandoffState {
	type key struct{ agent, path string }
	groups := map[key][]int{}
	for i, h := range hs {
		k := key{h.ConsumerAgentID, h.ArtifactPath}
		groups[k] = append(groups[k], i)
	}
	out := make([]HandoffState, len(hs))
	for i, h := range hs {
		out[i].Handoff = h
	}
	for _, members := range groups {
		index := make(map[string]int, len(members))
		for _, i := range members {
			index[hs[i].HandoffID] = i
		}
		// Explicit links; a later claimant of the same predecessor wins.
		for _, i := range members {
			if j, ok := index[hs[i].Supersedes]; ok && j != i {
				out[j].SupersededBy = hs[i].HandoffID
			}
		}
		current := -1
		for _, i := range members {
			if out[i].SupersededBy == "" {
				current = i // the latest one not superseded
			}
		}
		if current < 0 { // a cycle of links, only possible by hand
			current = members[len(members)-1]
		}
		cur := hs[current].HandoffID
		out[current].SupersededBy = ""
		for _, i := range members {
			if i != current && out[i].SupersededBy == "" {
				out[i].SupersededBy = cur
			}
		}
		// Newest first: follow the explicit chain back from the current
		// one, then the others, latest first.
		seen := map[int]bool{current: true}
		for i, ok := index[hs[current].Supersedes]; ok && !seen[i]; i, ok = index[hs[i].Supersedes] {
			seen[i] = true
			out[current].Replaced = append(out[current].Replaced, hs[i].HandoffID)
		}
		for m := len(members) - 1; m >= 0; m-- {
			if i := members[m]; !seen[i] {
				seen[i] = true
				out[current].Replaced = append(out[current].Replaced, hs[i].HandoffID)
			}
		}
	}
	return out
}

// CurrentHandoffs returns the handoffs of hs that are in force (see
// ResolveHandoffs), in their order.
func CurrentHandoffs(hs []*HandoffArtifact) []*HandoffArtifact {
	var out []*HandoffArtifact
	for _, s := range ResolveHandoffs(hs) {
		if s.Current() {
			out = append(out, s.Handoff)
		}
	}
	return out
}

// LoadHandoffStates loads every handoff and resolves which are current.
// States of the handoffs that load are returned even when the error is
// not nil.
func (r RunDir) LoadHandoffStates() ([]HandoffState, error) {
	all, err := r.LoadHandoffs()
	return ResolveHandoffs(all), err
}

// lockHandoffs takes an exclusive flock on the handoffs directory (no
// lock file is created, so watchers of the directory see nothing) and
// returns its release.
func (r RunDir) lockHandoffs() (func(), error) {
	d, err := os.Open(r.HandoffsDir())
	if err != nil {
		return nil, fmt.Errorf("lock handoffs: %w", err)
	}
	for {
		err = syscall.Flock(int(d.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", r.HandoffsDir(), err)
	}
	return func() {
		_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		d.Close()
	}, nil
}

// HandoffCheck is the outcome of verifying one handoff.
type HandoffCheck struct {
	Handoff         *HandoffArtifact
	ArtifactChecked bool   // false when no folder was given
	ArtifactSHA256  string // the original's current hash ("" when missing or unchecked)
	ArtifactMissing bool   // the original is gone
	ArtifactDrift   bool   // the original changed since the handoff
	CopyMissing     bool   // artifacts/<sha256> is gone
	CopyCorrupt     bool   // artifacts/<sha256> no longer has that hash
}

// OK reports whether nothing drifted and the stored copy is intact.
func (c HandoffCheck) OK() bool {
	return !c.ArtifactMissing && !c.ArtifactDrift && !c.CopyMissing && !c.CopyCorrupt
}

// Problems describes what went wrong, one sentence each.
func (c HandoffCheck) Problems() []string {
	h := c.Handoff
	var out []string
	if c.ArtifactMissing {
		out = append(out, fmt.Sprintf("%s: artifact %s no longer exists", h.HandoffID, h.ArtifactPath))
	}
	if c.ArtifactDrift {
		out = append(out, fmt.Sprintf("%s: artifact %s changed since the handoff (sha256 %s, handed over %s)",
			h.HandoffID, h.ArtifactPath, c.ArtifactSHA256, h.ArtifactSHA256))
	}
	if c.CopyMissing {
		out = append(out, fmt.Sprintf("%s: stored copy artifacts/%s is missing", h.HandoffID, h.ArtifactSHA256))
	}
	if c.CopyCorrupt {
		out = append(out, fmt.Sprintf("%s: stored copy artifacts/%s is corrupted", h.HandoffID, h.ArtifactSHA256))
	}
	return out
}

// VerifyHandoff re-hashes the stored copy and, when folder is not empty,
// the original artifact in the folder. A changed original is drift (the
// consumer still reads the handed-over bytes); a changed copy is
// corruption. err reports only failures to read, not mismatches.
func (r RunDir) VerifyHandoff(h *HandoffArtifact, folder string) (HandoffCheck, error) {
	c := HandoffCheck{Handoff: h}
	sum, err := digest.File(r.ArtifactPath(h.ArtifactSHA256))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.CopyMissing = true
	case err != nil:
		return c, fmt.Errorf("verify %s: %w", h.HandoffID, err)
	case sum != h.ArtifactSHA256:
		c.CopyCorrupt = true
	}
	if folder == "" {
		return c, nil
	}
	c.ArtifactChecked = true
	sum, err = digest.File(filepath.Join(folder, filepath.FromSlash(h.ArtifactPath)))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.ArtifactMissing = true
	case err != nil:
		return c, fmt.Errorf("verify %s: %w", h.HandoffID, err)
	default:
		c.ArtifactSHA256 = sum
		c.ArtifactDrift = sum != h.ArtifactSHA256
	}
	return c, nil
}
