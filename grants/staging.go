package grants

// MayWriteIn reports whether the grant lets the agent write some path
// below the directory dir (at any depth). Views allow private temporary
// files in such directories, so that tools which save by writing a
// temporary file and renaming it over the target work.
func (m *Matcher) MayWriteIn(name string) bool {
	st, dir := m.at(name)
	if st == nil || st.revoked || (dir != "" && st.blocked(dir)) {
		return false
	}
	if dir == "" {
		return len(st.write) > 0
	}
	return firstLeading(st.write, dir) >= 0
}
