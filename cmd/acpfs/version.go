package main

import (
	"runtime/debug"
	"strings"
)

// version is what acpfs --version prints, from the build information
// the Go toolchain embeds in the binary.
func version() string {
	info, ok := debug.ReadBuildInfo()
	return versionFrom(info, ok)
}

// versionFrom formats build information as one line: the main module's
// version, then the VCS revision, its commit time and whether the tree
// had uncommitted changes, when the build recorded them, and the Go
// version:
//
//	v1.2.0 (revision 1854593ab1c2…, 2026-12-02T16:55:00Z; go1.26.8)
//	(devel) (revision 1854593ab1c2…, 2026-12-02T16:55:00Z, modified; go1.26.8)
func versionFrom(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "unknown (no build information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	var vcs []string
	if rev := settings["vcs.revision"]; rev != "" {
		vcs = append(vcs, "revision "+rev)
	}
	if t := settings["vcs.time"]; t != "" {
		vcs = append(vcs, t)
	}
	if settings["vcs.modified"] == "true" {
		vcs = append(vcs, "modified")
	}
	details := strings.Join(vcs, ", ")
	if info.GoVersion != "" {
		if details != "" {
			details += "; "
		}
		details += info.GoVersion
	}
	if details == "" {
		return v
	}
	return v + " (" + details + ")"
}
