package store

// The documents' sync: the bucket's value format, keys and digests.

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/acpfs/acpfs/internal/digest"

	"github.com/acpfs/acpfs/internal/safeio"
)

func (d *Docs) encode(rel string, data []byte, mode uint32, base uint64, conflictOf string) []byte {
	h := docHeader{V: 1, Path: rel, SHA256: digest.Bytes(data), Host: d.s.Host(), Base: base,
		Size: int64(len(data)), Mode: mode & 0o777, ConflictOf: conflictOf, Session: d.session}
	hb, _ := json.Marshal(h)
	out := make([]byte, 0, len(hb)+1+len(data))
	out = append(append(append(out, hb...), '\n'), data...)
	return out
}

// decodeDoc parses a bucket value for the path rel and checks it: the
// header names rel, and the content has the size and SHA-256 it states.
func decodeDoc(val []byte, rel string) (docHeader, []byte, error) {
	var h docHeader
	i := bytes.IndexByte(val, '\n')
	if i < 0 || i > headerRoom {
		return h, nil, errors.New("no document header")
	}
	if err := json.Unmarshal(val[:i], &h); err != nil {
		return h, nil, fmt.Errorf("document header: %w", err)
	}
	content := val[i+1:]
	switch {
	case h.V != 1:
		return h, nil, fmt.Errorf("document header version %d", h.V)
	case h.Path != rel:
		return h, nil, fmt.Errorf("the header names %.200q", h.Path)
	case h.Size != int64(len(content)):
		return h, nil, fmt.Errorf("%d bytes where the header says %d", len(content), h.Size)
	case h.SHA256 != digest.Bytes(content):
		return h, nil, fmt.Errorf("the content's SHA-256 is not the header's %.64q", h.SHA256)
	}
	return h, content, nil
}

// keyOf is the bucket key of rel: base64url, whose alphabet keys allow
// (the path itself is in the value's header).
func keyOf(rel string) string { return base64.RawURLEncoding.EncodeToString([]byte(rel)) }

// pathOfKey decodes a key, and says whether it is a path a host may
// write: relative, clean, without "..".
func pathOfKey(key string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return "", false
	}
	rel := string(b)
	return rel, safeio.Valid(rel) && len(rel) <= maxPathLen
}

// modeOf is the mode a synced file gets: the permission bits of the
// writer's file, so that a private file stays private on every host.
// Set-id and sticky bits are never carried: a host never makes a set-id
// file because another host's value says so.
func modeOf(m uint32) uint32 { return m & 0o777 }

// newSession returns a random identifier for one run of the sync.
func newSession() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// versionDigest identifies a version for comparison: its SHA-256, or for
// protocol.json that of its static part only, so that the fields every
// host derives from the history itself never count as a change.
func versionDigest(rel string, b []byte) string {
	if rel == protocolJSON {
		var m map[string]any
		if json.Unmarshal(b, &m) == nil && m != nil {
			for _, k := range derivedFields {
				delete(m, k)
			}
			if c, err := json.Marshal(m); err == nil {
				return "static:" + digest.Bytes(c)
			}
		}
	}
	return digest.Bytes(b)
}
