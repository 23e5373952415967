// Package digest computes the content hashes acpfs records and compares:
// lowercase hex SHA-256, the form ACP's deliverable_frozen events and the
// ledger use.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

// Bytes returns the lowercase hex SHA-256 of b.
func Bytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// File returns the lowercase hex SHA-256 of the file at path.
func File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
