package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// protoFolder resolves a --folder value as the reference scripts do:
// "~" expanded, made absolute.
func protoFolder(s string) (string, error) {
	if s == "~" || strings.HasPrefix(s, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			s = filepath.Join(home, strings.TrimPrefix(s, "~"))
		}
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return "", fmt.Errorf("resolve folder %s: %w", s, err)
	}
	return abs, nil
}

// protoPrintJSON writes v as indented JSON followed by a newline.
func protoPrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// protoChoice checks a flag value against its allowed values.
func protoChoice(flag, value string, allowed []string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return withCode(exitFailed, fmt.Errorf("invalid --%s %q (choose from %s)", flag, value, strings.Join(allowed, ", ")))
}
