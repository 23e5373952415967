package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The parity corpus: collaboration folders built deterministically (fixed
// clock, fixed documents) and, for most of them, one candidate append.
// The reference implementation's verdicts on every case are committed in
// testdata/protocol/parity/golden.json; TestParityGolden checks acpfs's
// verdicts against them without Python, and regenerates them with it
// (scripts/parity-golden.sh).

// parityCase is one folder of the corpus and the append tried on it.
type parityCase struct {
	id string
	// build creates the folder below root and returns the kit that
	// drives it.
	build func(c *corpusBuilder, t *testing.T, root string) *kit
	// append, when set, is tried on the folder. Its defaults (doc,
	// reply_to, role, sha256; see kit.defaults) are taken from the built
	// folder; role and sha "-" mean none, as in transitionCases.
	append *ev
	// edit, when set, changes the built folder after the append's
	// defaults are taken (it may remove what they are taken from).
	edit func(k *kit)
}

// corpusLayout is how a corpus folder is initialised.
type corpusLayout struct {
	typ      string
	external bool
	parts    []string
}

func (l corpusLayout) key() string {
	return fmt.Sprintf("%s/%v/%s", l.typ, l.external, strings.Join(l.parts, ","))
}

func (l corpusLayout) options(root string) InitOptions {
	o := kitOptions(filepath.Join(root, "collab"), l.typ, l.parts...)
	if l.external {
		o.Folder = filepath.Join(root, "repo", ".acp", "run")
		o.Mode, o.RepoRoot, o.Dir = "external", "../..", "docs/acp-output"
	}
	return o
}

var defaultLayout = corpusLayout{typ: "design-spec"}

// happyStepCount is the length of the happy path of n participants: draft,
// submit, a review per reviewer, revise, classify, an acceptance per
// participant, freeze, readiness, completed.
func happyStepCount(n int) int { return 7 + (n - 1) + n }

// corpusBuilder builds the folders of one run of the corpus. It keeps one
// built folder per layout and number of happy steps: a case copies it
// instead of replaying the appends (and their fsyncs) again.
type corpusBuilder struct {
	mu   sync.Mutex
	dir  string
	done map[string]corpusTemplate
	// validated keeps validate's exit code per folder fingerprint: many
	// cases start from the same folder, and the reference takes a Python
	// start-up per run.
	validated map[string]int
}

type corpusTemplate struct {
	root, folder string // folder relative to root
	parts        []string
	clock        time.Time
}

func newCorpusBuilder(dir string) *corpusBuilder {
	return &corpusBuilder{dir: dir, done: map[string]corpusTemplate{}, validated: map[string]int{}}
}

// kit returns a kit on a folder below root holding the layout's
// collaboration after steps happy steps.
func (c *corpusBuilder) kit(t *testing.T, root string, l corpusLayout, steps int) *kit {
	t.Helper()
	tpl := c.template(t, l, steps)
	copyTree(t, tpl.root, root)
	k := &kit{t: t, dir: filepath.Join(root, tpl.folder), parts: tpl.parts, clock: tpl.clock}
	k.open()
	t.Cleanup(func() { k.log.Close() })
	return k
}

func (c *corpusBuilder) template(t *testing.T, l corpusLayout, steps int) corpusTemplate {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := fmt.Sprintf("%s/%d", l.key(), steps)
	if tpl, ok := c.done[key]; ok {
		return tpl
	}
	root := filepath.Join(c.dir, fmt.Sprint(len(c.done)))
	k := newKit(t, l.options(root))
	for _, s := range k.happySteps()[:steps] {
		s()
	}
	require.NoError(t, k.log.Close())
	rel, err := filepath.Rel(root, k.dir)
	require.NoError(t, err)
	tpl := corpusTemplate{root: root, folder: rel, parts: k.parts, clock: k.clock}
	c.done[key] = tpl
	return tpl
}

func copyTree(t *testing.T, src, dst string) {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	require.NoError(t, err)
}

// fingerprint hashes every file below root with its path, so that the
// golden test notices a case whose folder no longer is the one the
// reference judged.
func fingerprint(t *testing.T, root string) string {
	tree := treeOf(t, root)
	names := make([]string, 0, len(tree))
	for name := range tree {
		names = append(names, name)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		fmt.Fprintf(h, "%s\x00%d\x00%s", name, len(tree[name]), tree[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var slugRe = regexp.MustCompile(`[^a-z0-9]+`)

func slug(name string) string {
	return strings.Trim(slugRe.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// stateSteps returns the names of the two-participant happy path's
// states, in order: the i-th is the state after i happy steps.
func stateSteps() []string {
	names := make([]string, 0, len(states))
	for name := range states {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return states[names[i]] < states[names[j]] })
	return names
}

// parityCorpus lists every case. Ids are stable: the golden file is keyed
// by them.
func parityCorpus() []parityCase {
	var cases []parityCase
	at := func(state string, prep func(k *kit)) func(c *corpusBuilder, t *testing.T, root string) *kit {
		return func(c *corpusBuilder, t *testing.T, root string) *kit {
			k := c.kit(t, root, defaultLayout, states[state])
			if prep != nil {
				prep(k)
			}
			return k
		}
	}
	// Validator findings: every rule of the validator tests.
	for _, c := range validateCases {
		cases = append(cases, parityCase{id: "validate/" + slug(c.name), build: at(c.state, nil), edit: c.edit})
	}
	// Histories as other writers leave them, validated and extended.
	for _, c := range foreignCases {
		cases = append(cases,
			parityCase{id: "validate/foreign/" + slug(c.name), build: at(c.state, nil), edit: c.edit},
			parityCase{id: "append/foreign/" + slug(c.name), build: at("revising", nil), edit: c.edit,
				append: &ev{from: S, event: EvProposalRevised, replyTo: 4}})
	}
	// Every refusal rule of the state machine, and accepted transitions.
	for _, c := range transitionCases {
		e := c.e
		cases = append(cases, parityCase{id: "append/transition/" + slug(c.name), build: at(c.state, c.prep), append: &e})
	}
	cases = append(cases, matrixCases(defaultLayout, "append/matrix/", stateSteps(), EventNames)...)
	cases = append(cases, threeParticipantCases()...)
	cases = append(cases, layoutCases()...)
	cases = append(cases, brokenCases()...)
	return cases
}

// matrixCases try every event by every participant at every state of the
// happy path, with the documents the happy path leaves: stateNames[i]
// names the state after i happy steps.
func matrixCases(l corpusLayout, prefix string, stateNames []string, events []string) []parityCase {
	var cases []parityCase
	parts := l.parts
	if len(parts) == 0 {
		parts = []string{S, R}
	}
	for steps, state := range stateNames {
		for _, from := range parts {
			for _, event := range events {
				cases = append(cases, parityCase{
					id: prefix + state + "/" + from + "/" + event,
					build: func(c *corpusBuilder, t *testing.T, root string) *kit {
						return c.kit(t, root, l, steps)
					},
					append: &ev{from: from, event: event},
				})
			}
		}
	}
	return cases
}

// threeParticipantCases walk the happy path of three participants (two
// reviews, three acceptances) and try the events whose turn rules depend
// on the waiting set.
func threeParticipantCases() []parityCase {
	l := corpusLayout{typ: "design-spec", parts: []string{"server", "reader", "critic"}}
	var stateNames []string
	for i := 0; i <= happyStepCount(len(l.parts)); i++ {
		stateNames = append(stateNames, fmt.Sprintf("step%02d", i))
	}
	return matrixCases(l, "append/3p/", stateNames,
		[]string{EvReviewSubmitted, EvProposalRevised, EvQuestionClassified, EvDecisionAccepted, EvBlocked})
}

// layoutCases initialise every deliverable type, internal and external,
// with two and three participants: the fresh folder (and its first
// draft) and the completed one.
func layoutCases() []parityCase {
	var cases []parityCase
	for _, typ := range DeliverableTypes() {
		for _, external := range []bool{false, true} {
			for _, parts := range [][]string{{"server", "reader"}, {"lead", "qa", "dev"}} {
				l := corpusLayout{typ: typ, external: external, parts: parts}
				mode := "internal"
				if external {
					mode = "external"
				}
				name := fmt.Sprintf("%s/%s/%dp", typ, mode, len(parts))
				full := happyStepCount(len(parts))
				cases = append(cases,
					parityCase{id: "append/layout/fresh/" + name, append: &ev{from: parts[0], event: EvDeliverableDrafted},
						build: func(c *corpusBuilder, t *testing.T, root string) *kit { return c.kit(t, root, l, 0) }},
					parityCase{id: "append/layout/completed/" + name, append: &ev{from: parts[len(parts)-1], event: EvBlocked},
						build: func(c *corpusBuilder, t *testing.T, root string) *kit { return c.kit(t, root, l, full) }},
				)
			}
		}
	}
	return cases
}

// brokenCases damage the files of a folder at several states, and try
// the next event of the happy path on each.
func brokenCases() []parityCase {
	type damage struct {
		name string
		edit func(k *kit)
	}
	rm := func(name string) func(k *kit) {
		return func(k *kit) { require.NoError(k.t, os.Remove(filepath.Join(k.dir, name))) }
	}
	lastLine := func(f func(string) string) func(k *kit) {
		return func(k *kit) {
			lines := strings.Split(strings.TrimSuffix(k.read(EventsFile), "\n"), "\n")
			k.editLine(len(lines), f)
		}
	}
	damages := []damage{
		{"no damage", func(k *kit) {}},
		{"events removed", rm(EventsFile)},
		{"events emptied", func(k *kit) { k.write(EventsFile, "") }},
		{"protocol removed", rm(ProtocolFile)},
		{"protocol emptied", func(k *kit) { k.write(ProtocolFile, "") }},
		{"protocol truncated", func(k *kit) { p := k.read(ProtocolFile); k.write(ProtocolFile, p[:len(p)/2]) }},
		{"readiness removed", rm(ReadinessFile)},
		{"decisions removed", rm(DecisionsFile)},
		{"review removed", rm(ReviewFile)},
		{"conclusion removed", rm(ConclusionFile)},
		{"primary emptied", func(k *kit) { k.write(k.primaryPath(), "") }},
		{"last line duplicated", func(k *kit) {
			lines := strings.Split(strings.TrimSuffix(k.read(EventsFile), "\n"), "\n")
			k.write(EventsFile, k.read(EventsFile)+lines[len(lines)-1]+"\n")
		}},
		{"last line removed", func(k *kit) {
			lines := strings.Split(strings.TrimSuffix(k.read(EventsFile), "\n"), "\n")
			k.write(EventsFile, strings.Join(lines[:len(lines)-1], "\n")+"\n")
		}},
		{"last event from a stranger", lastLine(func(s string) string {
			return regexp.MustCompile(`"from":"[^"]*"`).ReplaceAllString(s, `"from":"mallory"`)
		})},
		{"last reply_to zero", lastLine(func(s string) string {
			return regexp.MustCompile(`"reply_to":\d+`).ReplaceAllString(s, `"reply_to":0`)
		})},
		{"last seq as float", lastLine(func(s string) string {
			return regexp.MustCompile(`"seq":(\d+)`).ReplaceAllString(s, `"seq":$1.0`)
		})},
		{"last at without zone", lastLine(func(s string) string { return strings.Replace(s, `Z"`, `"`, 1) })},
		{"last at with offset", lastLine(func(s string) string { return strings.Replace(s, `Z"`, `+00:00"`, 1) })},
		{"last summary empty", lastLine(func(s string) string {
			return regexp.MustCompile(`"summary":"[^"]*"`).ReplaceAllString(s, `"summary":""`)
		})},
		{"blank line inside", func(k *kit) { k.write(EventsFile, "\n"+k.read(EventsFile)) }},
		{"deferral without a reason", func(k *kit) {
			k.write(ReadinessFile, k.read(ReadinessFile)+"\n- [deferred_nonblocking] Pick a window later.\n")
		}},
		{"schema as float", func(k *kit) { k.replace(ProtocolFile, `"schemaVersion": 2`, `"schemaVersion": 2.0`) }},
		{"extra key in protocol", func(k *kit) { k.replace(ProtocolFile, "{\n", "{\n  \"x-note\": 2.50,\n") }},
	}
	var cases []parityCase
	next := map[string]ev{
		"init":       {from: S, event: EvDeliverableDrafted},
		"reviewing":  {from: R, event: EvReviewSubmitted},
		"classified": {from: R, event: EvDecisionAccepted},
		"frozen":     {from: S, event: EvReadinessPassed},
		"completed":  {from: R, event: EvBlocked},
	}
	for _, state := range []string{"init", "reviewing", "classified", "frozen", "completed"} {
		for _, d := range damages {
			e := next[state]
			build := func(c *corpusBuilder, t *testing.T, root string) *kit {
				k := c.kit(t, root, defaultLayout, states[state])
				if e.event == EvReviewSubmitted {
					k.writeReview(states[state]+2, R)
				}
				return k
			}
			cases = append(cases, parityCase{id: "append/broken/" + state + "/" + slug(d.name), build: build, edit: d.edit, append: &e})
		}
	}
	return cases
}
