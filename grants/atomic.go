package grants

import (
	"encoding/json"
	"os"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// writeFileAtomic replaces path by the one rule of internal/atomicfile.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return atomicfile.WriteFile(path, data, perm)
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
