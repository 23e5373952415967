package ledger

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// Key file names, kept in the ledger's own directory (the run directory),
// which no view and no sandbox ever shows.
const (
	KeyFile       = "ledger.key" // Ed25519 seed, mode 0600: writers only
	PublicKeyFile = "ledger.pub" // the public key: what a reviewer needs
)

const (
	keyHeader = "acpfs-ledger-key v1 ed25519 "
	pubHeader = "acpfs-ledger-pub v1 ed25519 "
)

// Key signs checkpoints and authenticates batches. The private half never
// leaves the writers' processes.
type Key struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	id   string
	mac  []byte
}

// PublicKey is what a reviewer holds: it checks signatures and cannot make
// them.
type PublicKey struct {
	pub ed25519.PublicKey
	id  string
}

// ID names the key in records: the first 16 hex digits of the SHA-256 of
// the public key.
func (k *Key) ID() string { return k.id }

// Public returns the verifying half.
func (k *Key) Public() PublicKey { return PublicKey{pub: k.pub, id: k.id} }

// ID names the key as records do.
func (p PublicKey) ID() string { return p.id }

// NewKey makes a key from a 32-byte seed (tests) or, with a nil seed,
// from the system's random source.
func NewKey(seed []byte) (*Key, error) {
	if seed == nil {
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, fmt.Errorf("new ledger key: %w", err)
		}
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("new ledger key: seed is %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	// The MAC key is derived, so one secret file serves both jobs.
	m := hmac.New(sha256.New, seed)
	m.Write([]byte("acpfs ledger batch mac v1"))
	return &Key{priv: priv, pub: pub, id: keyID(pub), mac: m.Sum(nil)}, nil
}

func keyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// LoadOrCreateKey returns the key kept in dir, creating it (and the public
// key beside it) on first use. The key file must be a regular file of
// this user with no permission for group or others: a key anyone else
// could read would let them forge records.
func LoadOrCreateKey(dir string) (*Key, error) {
	path := filepath.Join(dir, KeyFile)
	k, err := loadKey(path)
	if err == nil {
		return k, ensurePublic(dir, k)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k, err = NewKey(nil)
	if err != nil {
		return nil, err
	}
	if err := writeKeyFile(dir, k); errors.Is(err, fs.ErrExist) {
		// Another writer created it meanwhile: use theirs.
		return LoadOrCreateKey(dir)
	} else if err != nil {
		return nil, err
	}
	return k, ensurePublic(dir, k)
}

// writeKeyFile stores k's seed in dir, failing with fs.ErrExist when a
// key is already there. The key is written by the one rule of
// internal/atomicfile, installed only where no name is (renameat2
// RENAME_NOREPLACE), so that a writer starting at the same moment reads
// either no key or the whole key, never an empty file, and neither
// replaces the other's.
func writeKeyFile(dir string, k *Key) error {
	path := filepath.Join(dir, KeyFile)
	content := keyHeader + base64.StdEncoding.EncodeToString(k.priv.Seed()) + "\n"
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("create ledger key %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := atomicfile.At(fd).WriteFileNew(KeyFile, []byte(content), 0o600); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		return fmt.Errorf("create ledger key %s: %w", path, err)
	}
	return nil
}

func loadKey(path string) (*Key, error) {
	b, err := readSmallFile(path)
	if err != nil {
		return nil, err
	}
	s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), keyHeader)
	if !ok {
		return nil, fmt.Errorf("ledger key %s: not an acpfs ledger key", path)
	}
	seed, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("ledger key %s: %w", path, err)
	}
	return NewKey(seed)
}

// readSmallFile reads a key file without following a symlink, and refuses
// one that group or others may read or that another user owns.
func readSmallFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("ledger key %s: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("open ledger key %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat ledger key %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("ledger key %s: not a regular file", path)
	}
	if st.Mode&0o077 != 0 || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("ledger key %s: must be mode 0600 and owned by uid %d (is %04o, uid %d): anyone who reads it can forge records",
			path, os.Geteuid(), st.Mode&0o7777, st.Uid)
	}
	b := make([]byte, 256)
	n, err := f.Read(b)
	if err != nil {
		return nil, fmt.Errorf("read ledger key %s: %w", path, err)
	}
	return b[:n], nil
}

// ensurePublic writes the public key beside the key when it is missing.
func ensurePublic(dir string, k *Key) error {
	path := filepath.Join(dir, PublicKeyFile)
	if p, err := LoadPublicKey(path); err == nil {
		if p.id != k.id {
			return fmt.Errorf("ledger public key %s (%s) does not match the ledger key (%s)", path, p.id, k.id)
		}
		return nil
	}
	content := pubHeader + base64.StdEncoding.EncodeToString(k.pub) + "\n"
	if err := atomicfile.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write ledger public key: %w", err)
	}
	return nil
}

// LoadPublicKey reads a public key file (ledger.pub).
func LoadPublicKey(path string) (PublicKey, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return PublicKey{}, fmt.Errorf("open ledger public key %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	k, err := ParsePublicKey(b[:n])
	if err != nil {
		return PublicKey{}, fmt.Errorf("ledger public key %s: %w", path, err)
	}
	return k, nil
}

// ParsePublicKey reads the content of a public key file (ledger.pub).
func ParsePublicKey(b []byte) (PublicKey, error) {
	s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), pubHeader)
	if !ok {
		return PublicKey{}, errors.New("not an acpfs ledger public key")
	}
	pub, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return PublicKey{}, errors.New("malformed")
	}
	return PublicKey{pub: pub, id: keyID(pub)}, nil
}

// signingMessage is what MAC and Sig cover: the canonical encoding of r
// with MAC, Sig and Hash empty. It includes Prev, so it covers the chain.
func signingMessage(e *encoder, r *Record) ([]byte, error) {
	mac, sig := r.MAC, r.Sig
	r.MAC, r.Sig = "", ""
	b, err := e.canonical(r)
	r.MAC, r.Sig = mac, sig
	if err != nil {
		return nil, err
	}
	return append([]byte("acpfs-ledger-v1\x00"), b...), nil
}

func (k *Key) macOf(msg []byte) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// checkMAC reports whether r's MAC is this key's.
func (k *Key) checkMAC(e *encoder, r *Record) bool {
	if r.Key != k.id || r.MAC == "" {
		return false
	}
	msg, err := signingMessage(e, r)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(k.macOf(msg)), []byte(r.MAC))
}

// checkSig reports whether r carries a valid signature by p.
func (p PublicKey) checkSig(e *encoder, r *Record) bool {
	if r.Key != p.id || r.Sig == "" {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(r.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	msg, err := signingMessage(e, r)
	if err != nil {
		return false
	}
	return ed25519.Verify(p.pub, msg, sig)
}

// authentic reports whether a writer holding k may continue after r: it
// was sealed by a writer holding the same key.
func (k *Key) authentic(e *encoder, r *Record) bool {
	if r.Sig != "" {
		return k.Public().checkSig(e, r)
	}
	return k.checkMAC(e, r)
}

// seal sets Key and MAC (mac) or Sig (sign) on r; the caller then computes
// the hash.
func (k *Key) seal(e *encoder, r *Record, sign bool) error {
	r.Key, r.MAC, r.Sig = k.id, "", ""
	msg, err := signingMessage(e, r)
	if err != nil {
		return err
	}
	if sign {
		r.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(k.priv, msg))
	} else {
		r.MAC = k.macOf(msg)
	}
	return nil
}

// macV3 returns the version 3 batch seal of an unsigned line (its body,
// without a mac) that follows the record whose hash is prev: the first
// 128 bits of the HMAC-SHA256 of macPrefixV3 and the line's hash input,
// in unpadded base64url (22 characters, no escape in JSON).
func (k *Key) macV3(e *encoder, body []byte, prev string) string {
	msg := append(e.scratch[:0], macPrefixV3...)
	msg = chainInput(msg, body, prev)
	e.scratch = msg[:0]
	m := hmac.New(sha256.New, k.mac)
	m.Write(msg)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:macBytesV3])
}

// authenticV3 reports whether a writer holding k may continue after the
// line of a version 3 file that follows the record whose hash is prev:
// a signed record's signature, or an unsigned one's batch seal, is this
// key's.
func (k *Key) authenticV3(e *encoder, line []byte, prev string) bool {
	if hashed(line) {
		r, err := decodeLine(line)
		return err == nil && r.Prev == prev && k.Public().checkSig(e, &r)
	}
	body, mac, ok := macBody(line)
	if !ok {
		return false
	}
	return hmac.Equal([]byte(k.macV3(e, body, prev)), mac)
}
