package grants

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testGrant(mayRead, forbidden, mayWrite []string) *Grant {
	return &Grant{
		GrantID:       "G-test",
		AgentID:       "agent-a",
		Role:          "tester",
		Objective:     "exercise the matcher",
		MayRead:       mayRead,
		ForbiddenRead: forbidden,
		MayWrite:      mayWrite,
	}
}

func mustCompile(t testing.TB, g *Grant, hidden ...string) *Matcher {
	t.Helper()
	m, err := Compile(g, MatcherOptions{Hidden: hidden})
	require.NoError(t, err)
	return m
}

// vrw is the expected answer for one path: visible, readable, writable.
type vrw struct {
	path    string
	v, r, w bool
}

func checkPaths(t *testing.T, m *Matcher, cases []vrw) {
	t.Helper()
	for _, c := range cases {
		assert.Equal(t, c.v, m.Visible(c.path), "Visible(%q)", c.path)
		assert.Equal(t, c.r, m.Readable(c.path), "Readable(%q)", c.path)
		assert.Equal(t, c.w, m.Writable(c.path), "Writable(%q)", c.path)
		d := m.Explain(c.path)
		assert.Equal(t, c.v, d.Visible, "Explain(%q).Visible", c.path)
		assert.Equal(t, c.r, d.Readable, "Explain(%q).Readable", c.path)
		assert.Equal(t, c.w, d.Writable, "Explain(%q).Writable", c.path)
	}
}

func TestMatcherSemantics(t *testing.T) {
	tests := []struct {
		name                    string
		read, forbidden, writes []string
		hidden                  []string
		cases                   []vrw
	}{
		{
			name: "root always visible",
			read: []string{"a.md"},
			cases: []vrw{
				{"", true, false, false},
				{"a.md", true, true, false},
				{"b.md", false, false, false},
			},
		},
		{
			name:      "a conflict copy is judged by the file it copies",
			read:      []string{"**"},
			forbidden: []string{"notes/priv.md", "*.key"},
			writes:    []string{"notes/**"},
			cases: []vrw{
				{"notes/priv.md", false, false, false},
				{"notes/priv.md.conflict-ha-bb171915bfd8", false, false, false},
				{"notes/priv.md.conflict-ha-1.conflict-hb-2", false, false, false},
				{"a.key.conflict-hb-0123456789ab", false, false, false},
				{"notes/pub.md.conflict-ha-bb171915bfd8", true, true, true},
				{"notes/.conflict-ha-x", true, true, true},
				{"readme.md.conflict-ha-x", true, true, false},
				{strings.Repeat("n", 230) + ".conflict-ha-0123456789ab", false, false, false},
			},
		},
		{
			name: "doublestar below a literal directory",
			read: []string{"deliverables/**"},
			cases: []vrw{
				{"deliverables", true, true, false},
				{"deliverables/spec.md", true, true, false},
				{"deliverables/a/b/c.png", true, true, false},
				{"deliverablesX", false, false, false},
				{"deliverablesX/a", false, false, false},
				{"other", false, false, false},
			},
		},
		{
			name: "ancestors of a literal file are visible, not readable",
			read: []string{"deliverables/sub/a.md"},
			cases: []vrw{
				{"deliverables", true, false, false},
				{"deliverables/sub", true, false, false},
				{"deliverables/sub/a.md", true, true, false},
				{"deliverables/sub/b.md", false, false, false},
				{"deliverables/other", false, false, false},
				{"deliverables/sub/a.md/x", false, false, false},
			},
		},
		{
			name: "leading doublestar makes every directory visible",
			read: []string{"**/*.md"},
			cases: []vrw{
				{"x.md", true, true, false},
				{"a/b/x.md", true, true, false},
				{"a", true, false, false},
				{"a/b", true, false, false},
				{"x.txt", true, false, false}, // could be a directory: callers use Readable for files
			},
		},
		{
			name: "glob in the middle",
			read: []string{"docs/*/notes.md"},
			cases: []vrw{
				{"docs", true, false, false},
				{"docs/v1", true, false, false},
				{"docs/v1/notes.md", true, true, false},
				{"docs/v1/other.md", false, false, false},
				{"docs/v1/x/notes.md", false, false, false},
				{"docsx", false, false, false},
			},
		},
		{
			name: "single star stays in one name",
			read: []string{"*.md"},
			cases: []vrw{
				{"a.md", true, true, false},
				{"d/a.md", false, false, false},
				{"d", false, false, false},
			},
		},
		{
			name:      "forbidden wins over may_read, and hides everything below",
			read:      []string{"**"},
			forbidden: []string{"oracle/**", "secret"},
			cases: []vrw{
				{"a.md", true, true, false},
				{"oracle", false, false, false},
				{"oracle/x", false, false, false},
				{"oracle/x/y.md", false, false, false},
				{"secret", false, false, false},
				{"secret/inner/file", false, false, false},
				{"secretive.md", true, true, false},
				{"d/secret", true, true, false},
			},
		},
		{
			name:      "forbidden wins over may_write",
			read:      []string{"**"},
			forbidden: []string{"**/private-*"},
			writes:    []string{"**"},
			cases: []vrw{
				{"notes/a.md", true, true, true},
				{"notes/private-trace.log", false, false, false},
				{"private-x/a", false, false, false},
			},
		},
		{
			name:      "forbidden glob on names hides matching directories' contents",
			read:      []string{"**"},
			forbidden: []string{"*.secret"},
			cases: []vrw{
				{"x.secret", false, false, false},
				{"x.secret/y", false, false, false},
				{"d/x.secret", true, true, false}, // "*" does not cross "/"
			},
		},
		{
			name:   "writable implies readable and visible",
			read:   []string{"protocol.json"},
			writes: []string{"events.jsonl", "deliverables/"},
			cases: []vrw{
				{"events.jsonl", true, true, true},
				{"protocol.json", true, true, false},
				{"deliverables", true, true, true},
				{"deliverables/new.md", true, true, true},
			},
		},
		{
			name:   "run directory is never visible",
			read:   []string{"**"},
			writes: []string{"**"},
			hidden: []string{"agent_runs"},
			cases: []vrw{
				{"agent_runs", false, false, false},
				{"agent_runs/context_grants/G-x.json", false, false, false},
				{"agent_runs2", true, true, true},
				{"x/agent_runs", true, true, true},
			},
		},
		{
			name:   "nested run directory",
			read:   []string{"work/**"},
			hidden: []string{"./work/runs/"},
			cases: []vrw{
				{"work", true, true, false},
				{"work/runs", false, false, false},
				{"work/runs/a", false, false, false},
				{"work/runsx", true, true, false},
			},
		},
		{
			name:      "star matches dotfiles",
			read:      []string{"*", "d/**"},
			forbidden: []string{"d/.*"},
			cases: []vrw{
				{".env", true, true, false},
				{".hidden-dir", true, true, false},
				{"d/.git", false, false, false},
				{"d/.git/config", false, false, false},
				{"d/x", true, true, false},
			},
		},
		{
			name:      "forbidding dotfiles everywhere",
			read:      []string{"**"},
			forbidden: []string{"**/.*"},
			cases: []vrw{
				{".env", false, false, false},
				{"a/.git/HEAD", false, false, false},
				{"a/b.md", true, true, false},
			},
		},
		{
			name: "trailing slash means the directory and everything below",
			read: []string{"notes/", "a/b/"},
			cases: []vrw{
				{"notes", true, true, false},
				{"notes/x", true, true, false},
				{"notes/x/y", true, true, false},
				{"a", true, false, false},
				{"a/b", true, true, false},
				{"a/b/c", true, true, false},
				{"notesx", false, false, false},
			},
		},
		{
			name: "runs of stars inside a name are one star",
			read: []string{"a***/", "b**"},
			cases: []vrw{
				{"a", true, true, false},
				{"abc/d", true, true, false},
				{"b", true, true, false},
				{"bx", true, true, false},
				{"bx/y", false, false, false},
			},
		},
		{
			name: "literal directory without slash is the entry only",
			read: []string{"notes"},
			cases: []vrw{
				{"notes", true, true, false},
				{"notes/x", false, false, false},
			},
		},
		{
			name:      "unicode names",
			read:      []string{"文档/**", "résumé-?.md", "café/*.md"},
			forbidden: []string{"文档/机密/**"},
			cases: []vrw{
				{"文档", true, true, false},
				{"文档/设计.md", true, true, false},
				{"文档/机密", false, false, false},
				{"文档/机密/答案.md", false, false, false},
				{"résumé-é.md", true, true, false}, // "?" is one rune, not one byte
				{"résumé-ab.md", false, false, false},
				{"café", true, false, false},
				{"café/menu.md", true, true, false},
				{"cafe/menu.md", false, false, false},
			},
		},
		{
			name:      "case-sensitive",
			read:      []string{"Docs/**", "readme.md"},
			forbidden: []string{"Docs/Oracle"},
			cases: []vrw{
				{"Docs/a", true, true, false},
				{"docs/a", false, false, false},
				{"DOCS", false, false, false},
				{"README.md", false, false, false},
				{"readme.md", true, true, false},
				{"Docs/Oracle/x", false, false, false},
				{"Docs/oracle/x", true, true, false}, // a different name
			},
		},
		{
			name: "braces, classes and question marks",
			read: []string{"{proposal,review}.md", "logs/[0-9]?.txt", "x/{a,b/c}/**"},
			cases: []vrw{
				{"proposal.md", true, true, false},
				{"review.md", true, true, false},
				{"decisions.md", false, false, false},
				{"logs", true, false, false},
				{"logs/1a.txt", true, true, false},
				{"logs/a1.txt", false, false, false},
				{"x/a/z", true, true, false},
				{"x/b", true, false, false},
				{"x/b/c/z", true, true, false},
				{"x/b/z", false, false, false},
			},
		},
		{
			name: "doublestar in the middle",
			read: []string{"src/**/test/*.go"},
			cases: []vrw{
				{"src", true, false, false},
				{"src/a/b", true, false, false},
				{"src/test/x.go", true, true, false},
				{"src/a/b/test/x.go", true, true, false},
				{"src/a/b/test/x.txt", true, false, false}, // below a "**" anything could still lead to a match
				{"lib", false, false, false},
			},
		},
		{
			name: "dot segments in patterns are dropped",
			read: []string{"./a//b.md"},
			cases: []vrw{
				{"a", true, false, false},
				{"a/b.md", true, true, false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustCompile(t, testGrant(tt.read, tt.forbidden, tt.writes), tt.hidden...)
			checkPaths(t, m, tt.cases)
		})
	}
}

func TestVisibleEntry(t *testing.T) {
	m := mustCompile(t, testGrant([]string{"**/*.md", "a/b.txt"}, []string{"secret"}, nil))
	tests := []struct {
		path  string
		isDir bool
		want  bool
	}{
		{"x.md", false, true},
		{"x.txt", false, false}, // Visible says yes: it could be a directory
		{"x.txt", true, true},
		{"a", true, true},
		{"a", false, false},
		{"a/b.txt", false, true},
		{"secret", true, false},
		{"", true, true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, m.VisibleEntry(tt.path, tt.isDir), "%q dir=%v", tt.path, tt.isDir)
	}
	assert.True(t, m.Visible("x.txt"))
	assert.Zero(t, testing.AllocsPerRun(50, func() { m.VisibleEntry("a/b/c.md", false) }))
}

func TestRevokedShowsNothing(t *testing.T) {
	g := testGrant([]string{"**"}, nil, []string{"**"})
	g.Revoked = true
	m := mustCompile(t, g)
	checkPaths(t, m, []vrw{
		{"", true, false, false},
		{"a", false, false, false},
		{"events.jsonl", false, false, false},
	})
	assert.Equal(t, RuleRevoked, m.Explain("a").Rule)
}

func TestExplainNamesTheRule(t *testing.T) {
	g := testGrant(
		[]string{"*.md", "deliverables/**"},
		[]string{"oracle/**"},
		[]string{"events.jsonl", "proposal.md"},
	)
	m := mustCompile(t, g, "agent_runs")
	tests := []struct{ path, rule string }{
		{"", RuleRoot},
		{"oracle/answers.md", `forbidden_read "oracle/**"`},
		{"events.jsonl", `may_write "events.jsonl"`},
		{"proposal.md", `may_write "proposal.md"`},
		{"review.md", `may_read "*.md"`},
		{"deliverables/spec.md", `may_read "deliverables/**"`},
		{"agent_runs/x", RuleRunDir},
		{"notes.txt", RuleNoMatch},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.rule, m.Explain(tt.path).Rule, tt.path)
	}
	g2 := testGrant([]string{"deliverables/spec.md"}, nil, nil)
	m2 := mustCompile(t, g2)
	assert.Equal(t, `may_read "deliverables/spec.md" (ancestor of a match)`, m2.Explain("deliverables").Rule)
}

func TestCompileRejectsBadHidden(t *testing.T) {
	g := testGrant([]string{"**"}, nil, nil)
	for _, h := range []string{"/abs", "../up", "", "."} {
		_, err := Compile(g, MatcherOptions{Hidden: []string{h}})
		assert.Error(t, err, "hidden %q", h)
	}
	_, err := Compile(testGrant([]string{"a/../../x"}, nil, nil), MatcherOptions{})
	assert.ErrorContains(t, err, "may_read[0]")
}

// TestMatcherBeside: names with leading ".." segments (what a view
// rooted at the repository shows beside the folder) are judged only by
// patterns with as many; the folder's patterns never reach beside it, and
// the folder's ancestors are always on the way.
func TestMatcherBeside(t *testing.T) {
	g := testGrant(
		[]string{"protocol.json", "**/*.md", "../docs/**", "../*.go", "../../top.txt"},
		[]string{"oracle/**", "../docs/secret.md", "../**/*.key"},
		[]string{"review.md", "../docs/report.md"})
	m, err := Compile(g, MatcherOptions{Hidden: []string{"agent_runs"}})
	require.NoError(t, err)
	tests := []struct {
		name          string
		isDir         bool
		visible, r, w bool
		why           string
	}{
		{"protocol.json", false, true, true, false, "in the folder, as always"},
		{"../protocol.json", false, false, false, false, "the folder's pattern does not reach beside it"},
		{"notes/a.md", false, true, true, false, "**/*.md inside the folder"},
		{"../a.md", false, false, false, false, "**/*.md does not reach beside the folder"},
		{"../docs/a.md", false, true, true, false, "../docs/**"},
		{"../docs/report.md", false, true, true, true, "may_write ../docs/report.md"},
		{"../docs/secret.md", false, false, false, false, "forbidden beside the folder"},
		{"../docs/x.key", false, false, false, false, "../**/*.key"},
		{"../main.go", false, true, true, false, "../*.go"},
		{"../../top.txt", false, true, true, false, "two levels up"},
		{"../../main.go", false, false, false, false, "../*.go is one level up only"},
		{"../../../x", false, false, false, false, "no pattern reaches that far"},
		{"oracle/a.md", false, false, false, false, "forbidden in the folder"},
		{"agent_runs/a.md", false, false, false, false, "hidden directory"},
		{"..", true, true, false, false, "the folder's parent is on the way"},
		{"../..", true, true, false, false, "so is every ancestor"},
		{"../../..", true, true, false, false, "even past every pattern"},
		{"../docs", true, true, true, false, "../docs/** matches docs itself"},
		{"../src", true, false, false, false, "nothing leads there"},
		{"../.git", true, false, false, false, ".git beside the folder is hidden too"},
		{"..foo", false, false, false, false, "a name starting with two dots is a name"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.visible, m.VisibleEntry(tt.name, tt.isDir), "visible %s: %s", tt.name, tt.why)
		assert.Equal(t, tt.r, m.Readable(tt.name), "readable %s: %s", tt.name, tt.why)
		assert.Equal(t, tt.w, m.Writable(tt.name), "writable %s: %s", tt.name, tt.why)
	}
	assert.Equal(t, `forbidden_read "../docs/secret.md"`, m.Explain("../docs/secret.md").Rule)
	assert.Equal(t, RuleRoot, m.Explain("..").Rule)
	assert.False(t, m.ShowsAll(".."), "an ancestor holds the folder and its rules")
	assert.True(t, m.MayWriteIn("../docs"))
	assert.False(t, m.MayWriteIn("../src"))

	revoked := *g
	revoked.Revoked = true
	rm, err := Compile(&revoked, MatcherOptions{})
	require.NoError(t, err)
	assert.False(t, rm.VisibleEntry("..", true))
	assert.False(t, rm.Readable("../docs/a.md"))
}

func TestMatcherZeroAlloc(t *testing.T) {
	m := mustCompile(t, benchGrant(), "agent_runs")
	paths := benchPaths()
	allocs := testing.AllocsPerRun(100, func() {
		for _, p := range paths {
			m.Visible(p)
			m.Readable(p)
			m.Writable(p)
		}
	})
	assert.Zero(t, allocs)
}

func TestMatcherConcurrent(t *testing.T) {
	m := mustCompile(t, benchGrant(), "agent_runs")
	paths := benchPaths()
	want := make([]bool, len(paths))
	for i, p := range paths {
		want[i] = m.Visible(p)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 200; n++ {
				for i, p := range paths {
					if m.Visible(p) != want[i] {
						t.Errorf("Visible(%q) changed under concurrency", p)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// benchGrant has 50 rules of the shapes coordinators write.
func benchGrant() *Grant {
	var read, forbid, write []string
	read = append(read, "protocol.json", "events.jsonl", "proposal.md", "review.md", "decisions.md",
		"readiness.md", "conclusion.md", "deliverables/", "docs/**/*.md", "**/README.md")
	for i := 0; i < 20; i++ {
		read = append(read, fmt.Sprintf("inputs/topic-%02d/**", i))
	}
	for i := 0; i < 10; i++ {
		forbid = append(forbid, fmt.Sprintf("inputs/topic-%02d/oracle/**", i))
	}
	forbid = append(forbid, "**/.git", "**/*.key", "scratch/private-*")
	write = append(write, "events.jsonl", "protocol.json", "proposal.md", "decisions.md",
		"readiness.md", "conclusion.md", "deliverables/")
	return testGrant(read, forbid, write)
}

func benchPaths() []string {
	return []string{
		"events.jsonl",
		"deliverables/design-spec.md",
		"inputs/topic-07/data/table.csv",
		"inputs/topic-03/oracle/answers.md",
		"docs/guide/chapter/one.md",
		"scratch/notes.txt",
		"agent_runs/context_grants/G-a.json",
		"src/pkg/module/file.go",
	}
}

func BenchmarkMatcher50Rules(b *testing.B) {
	g := benchGrant()
	require.Equal(b, 50, len(g.MayRead)+len(g.ForbiddenRead)+len(g.MayWrite))
	m := mustCompile(b, g, "agent_runs")
	paths := benchPaths()
	for _, op := range []struct {
		name string
		f    func(string) bool
	}{{"Visible", m.Visible}, {"Readable", m.Readable}, {"Writable", m.Writable}} {
		b.Run(op.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				op.f(paths[i%len(paths)])
			}
		})
	}
}

func TestShowsAll(t *testing.T) {
	tests := []struct {
		name            string
		read, forbidden []string
		hidden          []string
		dir             string
		want            bool
	}{
		{"everything", []string{"**"}, nil, nil, "", true},
		{"everything, subdirectory", []string{"**"}, nil, nil, "a/b", true},
		{"a forbidden pattern below", []string{"**"}, []string{"oracle/**"}, nil, "", false},
		{"a forbidden pattern elsewhere", []string{"**"}, []string{"oracle/**"}, nil, "docs", true},
		{"a forbidden name at any depth", []string{"**"}, []string{"**/*.key"}, nil, "docs", false},
		{"a forbidden glob with a literal head elsewhere", []string{"**"}, []string{"secret/*.md"}, nil, "docs", true},
		{"a forbidden glob with a literal head above", []string{"**"}, []string{"docs/*.md"}, nil, "docs", false},
		{"the run directory inside", []string{"**"}, nil, []string{"docs/runs"}, "docs", false},
		{"covered by a directory grant", []string{"docs/**"}, nil, nil, "docs/x", true},
		{"only a sibling is granted", []string{"docs/**"}, nil, nil, "doc", false},
		{"a file list only", []string{"docs/a.md"}, nil, nil, "docs", false},
		{"the root under a directory grant", []string{"docs/**"}, nil, nil, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &Grant{GrantID: "G-t", AgentID: "a", Role: "r", Objective: "o", MayRead: tc.read, ForbiddenRead: tc.forbidden}
			m, err := Compile(g, MatcherOptions{Hidden: tc.hidden})
			require.NoError(t, err)
			assert.Equal(t, tc.want, m.ShowsAll(tc.dir))
			if tc.want {
				// Whatever ShowsAll promises, the matcher keeps.
				for _, p := range []string{tc.dir, join(tc.dir, "x"), join(tc.dir, "x/y.key")} {
					if p != "" {
						assert.True(t, m.Readable(p), p)
					}
				}
			}
		})
	}
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// TestGitShownOnlyWhenNamed (issue 24): a repository's .git holds every
// committed file, past and present (the oracle's too): a grant shows it
// only when one of its patterns names it.
func TestGitShownOnlyWhenNamed(t *testing.T) {
	all := &Grant{GrantID: "G-a", AgentID: "a", MayRead: []string{"**"}, MayWrite: []string{"src/**"}}
	named := &Grant{GrantID: "G-g", AgentID: "g", MayRead: []string{"**", ".git/**"}, MayWrite: []string{"src/**", ".git/**"}}
	tests := []struct {
		g       *Grant
		rel     string
		visible bool
	}{
		{all, ".git", false},
		{all, ".git/HEAD", false},
		{all, "sub/.git/config", false},
		{all, "src/.git", false},
		{all, "src/x.go", true},
		{all, ".gitignore", true},
		{all, "notes.git", true},
		{named, ".git", true},
		{named, ".git/objects/ab/cd", true},
	}
	for _, tt := range tests {
		m, err := Compile(tt.g, MatcherOptions{})
		require.NoError(t, err)
		assert.Equal(t, tt.visible, m.Visible(tt.rel), "%s: %s", tt.g.GrantID, tt.rel)
		if !tt.visible {
			assert.False(t, m.Readable(tt.rel), "%s: %s", tt.g.GrantID, tt.rel)
		}
	}
	m, err := Compile(all, MatcherOptions{})
	require.NoError(t, err)
	assert.Equal(t, RuleGit, m.Explain(".git/HEAD").Rule)
	assert.False(t, m.Writable("src/.git/config"))
}
