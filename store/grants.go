package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// A grant lives in the grants bucket under "<host>.<grant id>": the host
// part says which host mounts it, so a coordinator anywhere can assign a
// view to any host and every host watches only its own keys.

// ErrGrantExists says the grant id is taken (on any host).
var ErrGrantExists = errors.New("grant id already in the store")

func grantKey(host, id string) string { return host + "." + id }

// GrantEntry is one grant of the store with the host that mounts it.
type GrantEntry struct {
	Host     string
	Grant    *grants.Grant
	Revision uint64
}

// Grants lists every grant of the collaboration, on every host.
func (s *Store) Grants() ([]GrantEntry, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	lister, err := s.grants.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list grants: %w", offline(err))
	}
	var out []GrantEntry
	for key := range lister.Keys() {
		e, err := s.grants.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("grant %s: %w", key, offline(err))
		}
		ge, err := decodeGrant(e)
		if err != nil {
			return nil, err
		}
		out = append(out, ge)
	}
	return out, nil
}

func decodeGrant(e jetstream.KeyValueEntry) (GrantEntry, error) {
	host, id, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return GrantEntry{}, fmt.Errorf("grant key %q: want <host>.<grant id>", e.Key())
	}
	var g grants.Grant
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return GrantEntry{}, fmt.Errorf("grant %s: %w", e.Key(), err)
	}
	if g.GrantID != id {
		return GrantEntry{}, fmt.Errorf("grant %s: its grant_id is %q", e.Key(), g.GrantID)
	}
	if err := grants.Validate(&g); err != nil {
		return GrantEntry{}, fmt.Errorf("grant %s: %w", e.Key(), err)
	}
	return GrantEntry{Host: host, Grant: &g, Revision: e.Revision()}, nil
}

// CreateGrant stores g for host. It fails with ErrGrantExists when the
// id is taken on any host, and when the agent already holds an active
// grant.
func (s *Store) CreateGrant(host string, g *grants.Grant) error {
	if !validName(host) {
		return fmt.Errorf("host name %q: use 1 to 64 letters, digits, '-' or '_'", host)
	}
	if err := grants.Validate(g); err != nil {
		return err
	}
	all, err := s.Grants()
	if err != nil {
		return err
	}
	for _, e := range all {
		if e.Grant.GrantID == g.GrantID {
			return fmt.Errorf("%s on host %s: %w", g.GrantID, e.Host, ErrGrantExists)
		}
		if e.Grant.AgentID == g.AgentID && !e.Grant.Revoked {
			return fmt.Errorf("agent %q already has an active grant %s on host %s; revoke it first", g.AgentID, e.Grant.GrantID, e.Host)
		}
	}
	data, err := json.Marshal(g)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if _, err := s.grants.Create(ctx, grantKey(host, g.GrantID), data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%s: %w", g.GrantID, ErrGrantExists)
		}
		return fmt.Errorf("store grant %s: %w", g.GrantID, offline(err))
	}
	return nil
}

// UpdateGrant replaces a stored grant on condition that it is still the
// revision e was read at (a revocation racing an edit loses neither).
func (s *Store) UpdateGrant(e GrantEntry) error {
	data, err := json.Marshal(e.Grant)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if _, err := s.grants.Update(ctx, grantKey(e.Host, e.Grant.GrantID), data, e.Revision); err != nil {
		return fmt.Errorf("update grant %s: %w", e.Grant.GrantID, offline(err))
	}
	return nil
}

// FindGrant returns the stored grant that ref names (any grant
// reference but a file: see grants.Resolve), whichever host it is for.
func (s *Store) FindGrant(ref string) (GrantEntry, error) {
	all, err := s.Grants()
	if err != nil {
		return GrantEntry{}, err
	}
	set := make([]grants.GrantFile, len(all))
	for i, e := range all {
		set[i] = grants.GrantFile{Path: e.Host, Grant: e.Grant}
	}
	gf, err := grants.Resolve(set, ref)
	if err != nil {
		return GrantEntry{}, fmt.Errorf("collaboration %s: %w", s.opts.Collab, err)
	}
	for _, e := range all {
		if e.Grant == gf.Grant {
			return e, nil
		}
	}
	return GrantEntry{}, fmt.Errorf("collaboration %s: grant %s vanished", s.opts.Collab, gf.Grant.GrantID)
}

// GrantRecorder is told what a host's copy of its grants did, for the
// ledger: kind is grant_created or grant_revoked (a grant deleted from the store counts as revoked).
type GrantRecorder func(kind ledger.Kind, g *grants.Grant, detail string)

// SyncGrants keeps rd's grants equal to the store's grants for this
// host until ctx ends: a new or changed grant is saved, a deleted one
// removed. The run directory's watchers (the coordinator) then mount,
// change or unmount the views as they do for local grants. It returns
// once the first full copy is made.
func (s *Store) SyncGrants(ctx context.Context, rd grants.RunDir, rec GrantRecorder) error {
	w, err := s.grants.Watch(ctx, s.opts.Host+".>")
	if err != nil {
		return fmt.Errorf("watch grants of host %s: %w", s.opts.Host, offline(err))
	}
	seen := map[string]bool{}
	apply := func(e jetstream.KeyValueEntry) {
		id := strings.TrimPrefix(e.Key(), s.opts.Host+".")
		switch e.Operation() {
		case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
			delete(seen, id)
			if grants.CheckID(id, "G") != nil {
				return
			}
			if err := os.Remove(rd.GrantPath(id)); err == nil {
				os.Remove(rd.PromptPath(id))
				if rec != nil {
					rec("grant_revoked", &grants.Grant{GrantID: id}, fmt.Sprintf("deleted from the store (revision %d)", e.Revision()))
				}
			}
			return
		}
		ge, err := decodeGrant(e)
		if err != nil {
			slog.Warn("grant from the store refused", "key", e.Key(), "err", err)
			return
		}
		seen[id] = true
		old, _, _ := rd.FindGrant(id)
		if old != nil && grantsEqual(old, ge.Grant) {
			return
		}
		if err := rd.SaveGrant(ge.Grant); err != nil {
			slog.Warn("save grant from the store", "grant", id, "err", err)
			return
		}
		if rec != nil {
			kind, what := ledger.KindGrantCreated, "from the store"
			if ge.Grant.Revoked {
				kind, what = ledger.KindGrantRevoked, "revoked in the store"
			}
			rec(kind, ge.Grant, fmt.Sprintf("%s (revision %d)", what, ge.Revision))
		}
	}
	// The initial values end with a nil entry; then local grants the
	// store no longer holds for this host are removed.
	for e := range w.Updates() {
		if e == nil {
			break
		}
		apply(e)
	}
	if err := s.pruneGrants(rd, seen, rec); err != nil {
		w.Stop()
		return err
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					apply(e)
				}
			}
		}
	}()
	return nil
}

// pruneGrants removes rd's grants that the store does not hold for this
// host: on a store host the run directory's grants are a copy.
func (s *Store) pruneGrants(rd grants.RunDir, keep map[string]bool, rec GrantRecorder) error {
	// Grants that do not load are left alone: the coordinator reports
	// them, and mounts none of them.
	local, _ := rd.LoadGrants()
	for _, gf := range local {
		if keep[gf.Grant.GrantID] {
			continue
		}
		if err := os.Remove(rd.GrantPath(gf.Grant.GrantID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove grant %s that the store does not hold: %w", gf.Grant.GrantID, err)
		}
		os.Remove(rd.PromptPath(gf.Grant.GrantID))
		if rec != nil {
			rec("grant_revoked", gf.Grant, "not in the store for host "+s.opts.Host)
		}
	}
	return nil
}

func grantsEqual(a, b *grants.Grant) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}
