package grants

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic replaces path with data: a temporary file in the same
// directory (named with a leading dot, so loaders skip it) is written,
// synced, given mode perm and renamed over path; the directory is synced
// so that the rename survives a crash.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err = finishTemp(tmp, perm); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// finishTemp syncs, chmods and closes a temporary file.
func finishTemp(tmp *os.File, perm os.FileMode) error {
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return err
	}
	return tmp.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// marshalIndent renders a record the way the run directory stores it:
// indented JSON with a final newline, readable by people and diff tools.
func marshalIndent(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
