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
	"time"

	"github.com/acpfs/acpfs/internal/digest"
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
func (r RunDir) CreateHandoff(req HandoffRequest) (*HandoffArtifact, error) {
	h, full, err := r.prepareHandoff(req)
	if err != nil {
		return nil, err
	}
	if err := r.Init(); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(r.HandoffPath(h.HandoffID)); err == nil {
		return nil, fmt.Errorf("handoff %s already exists", h.HandoffID)
	}
	sum, err := r.storeArtifact(full)
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
// its hash) and the artifact's path on disk.
func (r RunDir) prepareHandoff(req HandoffRequest) (*HandoffArtifact, string, error) {
	src, dst := req.Source, req.Target
	if src == nil || dst == nil {
		return nil, "", errors.New("handoff: source and target grants are required")
	}
	for _, g := range []*Grant{src, dst} {
		if g.Revoked {
			return nil, "", fmt.Errorf("handoff: grant %s is revoked", g.GrantID)
		}
	}
	id := req.ID
	if id == "" {
		id = NewID("H", src.AgentID+"-to-"+dst.AgentID)
	}
	if err := CheckID(id, "H"); err != nil {
		return nil, "", fmt.Errorf("handoff id: %w", err)
	}
	rel, err := cleanRel(filepath.ToSlash(req.ArtifactPath))
	if err != nil || rel == "" {
		if err == nil {
			err = errRootOnly
		}
		return nil, "", fmt.Errorf("handoff artifact path %q: %w", req.ArtifactPath, err)
	}
	hidden, err := r.HiddenIn(req.Folder)
	if err != nil {
		return nil, "", fmt.Errorf("handoff: %w", err)
	}
	m, err := Compile(src, MatcherOptions{Hidden: hidden})
	if err != nil {
		return nil, "", fmt.Errorf("handoff: %w", err)
	}
	if !m.Readable(rel) {
		return nil, "", fmt.Errorf("handoff: grant %s (agent %s) may not read %s, so it cannot hand it over (%s)",
			src.GrantID, src.AgentID, rel, m.Explain(rel).Rule)
	}
	full, err := regularFileIn(req.Folder, rel)
	if err != nil {
		return nil, "", fmt.Errorf("handoff: %w", err)
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
	}, full, nil
}

// regularFileIn returns folder/rel after checking that it is a regular
// file (not a link) whose directory resolves inside the folder.
func regularFileIn(folder, rel string) (string, error) {
	base, err := realAbs(folder)
	if err != nil {
		return "", fmt.Errorf("resolve folder: %w", err)
	}
	full := filepath.Join(folder, filepath.FromSlash(rel))
	dir, err := realAbs(filepath.Dir(full))
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", rel, err)
	}
	if d, err := filepath.Rel(base, dir); err != nil || d == ".." || strings.HasPrefix(d, "../") {
		return "", fmt.Errorf("%s resolves outside the collaboration folder", rel)
	}
	fi, err := os.Lstat(full)
	if err != nil {
		return "", fmt.Errorf("artifact %s: %w", rel, err)
	}
	switch {
	case fi.IsDir():
		return "", fmt.Errorf("artifact %s is a directory; hand over files one by one", rel)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("artifact %s is not a regular file", rel)
	}
	return full, nil
}

// storeArtifact copies src to artifacts/<sha256> (mode 0444) while hashing
// it, and returns the hash. An intact existing copy is kept; a corrupted
// one is replaced.
func (r RunDir) storeArtifact(src string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(r.ArtifactsDir(), ".incoming-*")
	if err != nil {
		return "", err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // a no-op once renamed
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := finishTemp(tmp, 0o444); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	dst := r.ArtifactPath(sum)
	if got, err := digest.File(dst); err == nil && got == sum {
		return sum, nil
	}
	if err := os.Rename(tmpName, dst); err != nil {
		return "", err
	}
	return sum, syncDir(r.ArtifactsDir())
}

// HashFile returns the lowercase hex SHA-256 of a file's content.
func HashFile(path string) (string, error) { return digest.File(path) }

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
	if !isSHA256(h.ArtifactSHA256) {
		problems = append(problems, fmt.Sprintf("artifact_sha256: %q is not 64 lowercase hex digits", h.ArtifactSHA256))
	}
	if rel, err := cleanRel(h.ArtifactPath); err != nil || rel != h.ArtifactPath {
		problems = append(problems, fmt.Sprintf("artifact_path: %q is not a clean folder-relative path", h.ArtifactPath))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("invalid handoff %s: %s", h.HandoffID, strings.Join(problems, "; "))
	}
	return &h, nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
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

// HandoffsFor returns the handoffs addressed to a consumer: those whose
// target_grant_id is grantID or whose consumer_agent_id is agentID (so an
// agent whose grant was replaced still sees what was handed to it). Pass
// "" to leave either criterion out. The filesystem shows the consumer the
// stored copies of these artifacts.
func (r RunDir) HandoffsFor(grantID, agentID string) ([]*HandoffArtifact, error) {
	all, err := r.LoadHandoffs()
	var out []*HandoffArtifact
	for _, h := range all {
		if (grantID != "" && h.TargetGrantID == grantID) || (agentID != "" && h.ConsumerAgentID == agentID) {
			out = append(out, h)
		}
	}
	return out, err
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
