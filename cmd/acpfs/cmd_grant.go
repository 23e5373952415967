package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
)

func init() { register(newGrantCmd) }

func newGrantCmd() *cobra.Command {
	return groupCmd("grant", "Create, check, render, list and revoke context grants in a run directory",
		`A context grant says what one agent may read and write in the collaboration
folder. Grants live in DIR/context_grants/G-<id>.json next to the rendered
prompt G-<id>.prompt.md; the ledger DIR/communication_ledger.jsonl records
their creation and revocation.`,
		newGrantCreateCmd(), newGrantCheckCmd(), newGrantRenderCmd(), newGrantListCmd(), newGrantRevokeCmd())
}

// grantRunsFlag adds the --runs flag shared by the grant, handoff and
// explain commands.
func grantRunsFlag(cmd *cobra.Command, runs *string) {
	cmd.Flags().StringVar(runs, "runs", grants.DefaultRunDirName, "run directory (context_grants/, handoffs/, ledger)")
}

// grantReadProtocol loads the collaboration's protocol.json.
func grantReadProtocol(folder string) (*protocol.Protocol, error) {
	p, err := protocol.LoadProtocol(folder)
	if err != nil {
		return nil, fmt.Errorf("read collaboration protocol: %w", err)
	}
	return p, nil
}

// grantCheckParticipant refuses a participant the protocol does not list:
// its appends to events.jsonl could never be accepted.
func grantCheckParticipant(p *protocol.Protocol, folder, participant string) error {
	ids := p.ParticipantIDs()
	if slices.Contains(ids, participant) {
		return nil
	}
	return fmt.Errorf("participant %q is not listed in %s (participants: %s)",
		participant, filepath.Join(folder, protocol.ProtocolFile), strings.Join(ids, ", "))
}

// grantRecord appends one record to the run directory's ledger.
func grantRecord(rd grants.RunDir, rec ledger.Record) error {
	if err := rd.Init(); err != nil {
		return err
	}
	w, err := ledger.Open(rd.LedgerPath(), ledger.Options{})
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	if _, err := w.Append(rec); err != nil {
		_ = w.Close()
		return fmt.Errorf("record %s: %w", rec.Kind, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("close ledger: %w", err)
	}
	return nil
}

func grantNow() string { return time.Now().UTC().Format(time.RFC3339) }

// grantRevokedNow stamps a revocation to the nanosecond, as the ledger
// stamps its records, so that the audit can tell what an agent did just
// before the revocation from what it did after.
func grantRevokedNow() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// grantCreateFlags holds the flags of grant create.
type grantCreateFlags struct {
	runs, folder, agent, id, participant, role, objective, preset string
	outputContract, decisionAuthority                             string
	mayRead, forbid, mayWrite, guidance, inputs, stops            []string
	store                                                         storeFlags
}

func newGrantCreateCmd() *cobra.Command {
	var f grantCreateFlags
	cmd := &cobra.Command{
		Use:   "create --folder F --agent A [--preset owner|reviewer] [flags]",
		Short: "Write a grant and its prompt, and record grant_created in the ledger",
		Long: `create writes DIR/context_grants/G-<id>.json and G-<id>.prompt.md. The
grant id is G-<agent> unless --id names another ("--id bob-2" and
"--id G-bob-2" both give G-bob-2); an id already in use is refused.

--preset fills may_read and may_write for an ACP role (owner: the proposal
owner; reviewer); --may-read, --may-write and --forbid add to them. The
role defaults to the preset's name and the objective to the protocol's.
The participant (default: the agent id) must be listed in F/protocol.json.
An agent may hold only one active grant: revoke the old one first.

With --store URL --collab NAME --host H the grant goes to the store of a
collaboration served from several hosts instead of the run directory, and
host H mounts it (docs/multihost.md).`,
		Example: `  acpfs grant create --folder collab --agent claude --participant server --preset owner
  acpfs grant create --folder collab --agent codex --participant reader --preset reviewer --forbid 'oracle/**'
  acpfs grant create --folder collab --agent grader --role grader --objective "Grade the spec" \
      --may-read 'deliverables/**' --input spec=deliverables/design-spec.md --guidance "Be terse."`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return grantCreate(cmd, f)
		},
	}
	fl := cmd.Flags()
	grantRunsFlag(cmd, &f.runs)
	fl.StringVar(&f.folder, "folder", "", "collaboration folder (its protocol.json lists the participants)")
	fl.StringVar(&f.agent, "agent", "", "agent id")
	fl.StringVar(&f.id, "id", "", "grant id, as G-<id> or <id> (default: G-<agent>)")
	fl.StringVar(&f.participant, "participant", "", "ACP participant the agent writes as (default: the agent id)")
	fl.StringVar(&f.role, "role", "", "role (default: the preset's name)")
	fl.StringVar(&f.objective, "objective", "", "objective (default: the protocol's objective)")
	fl.StringVar(&f.preset, "preset", "", "role preset: "+strings.Join(grants.Presets(), " or "))
	fl.StringArrayVar(&f.mayRead, "may-read", nil, "glob the agent may read (repeatable)")
	fl.StringArrayVar(&f.forbid, "forbid", nil, "glob the agent must never see, even if granted elsewhere (repeatable)")
	fl.StringArrayVar(&f.mayWrite, "may-write", nil, "glob the agent may write (repeatable)")
	fl.StringArrayVar(&f.guidance, "guidance", nil, "guidance line injected into the prompt (repeatable)")
	fl.StringArrayVar(&f.inputs, "input", nil, "named input slot=path (repeatable)")
	fl.StringArrayVar(&f.stops, "stop", nil, "stop condition (repeatable)")
	fl.StringVar(&f.outputContract, "output-contract", "", "what the agent must produce")
	fl.StringVar(&f.decisionAuthority, "decision-authority", "", "what the agent may decide")
	f.store.register(cmd)
	fl.Lookup("host").Usage = "with --store: the host that mounts the grant"
	_ = cmd.MarkFlagRequired("folder")
	_ = cmd.MarkFlagRequired("agent")
	return cmd
}

func grantCreate(cmd *cobra.Command, f grantCreateFlags) error {
	g, err := grantFromFlags(cmd, f)
	if err != nil {
		return err
	}
	if f.store.set() {
		return grantCreateInStore(cmd, f.store, g)
	}
	return grantCreateInRunDir(cmd, f.runs, g)
}

// grantFromFlags builds and validates the grant grant create's flags
// describe, filling what they leave out from the collaboration's protocol
// and the preset.
func grantFromFlags(cmd *cobra.Command, f grantCreateFlags) (*grants.Grant, error) {
	info, err := grantReadProtocol(f.folder)
	if err != nil {
		return nil, err
	}
	g := &grants.Grant{
		GrantID:           grants.NormalizeGrantID(f.id),
		AgentID:           f.agent,
		Participant:       f.participant,
		Role:              f.role,
		Objective:         f.objective,
		ForbiddenRead:     f.forbid,
		InjectedGuidance:  f.guidance,
		OutputContract:    f.outputContract,
		DecisionAuthority: f.decisionAuthority,
		StopConditions:    f.stops,
		CreatedAt:         grantNow(),
	}
	if g.Participant == g.AgentID {
		g.Participant = ""
	}
	if err := grantCheckParticipant(info, f.folder, g.ParticipantID()); err != nil {
		return nil, err
	}
	if f.preset != "" {
		if err := grantApplyPreset(cmd, info, f.preset, g); err != nil {
			return nil, err
		}
	}
	g.MayRead = grantAppendNew(g.MayRead, f.mayRead)
	g.MayWrite = grantAppendNew(g.MayWrite, f.mayWrite)
	if g.Objective == "" {
		g.Objective = info.Objective()
	}
	if g.Role == "" {
		return nil, errors.New("--role is required without --preset")
	}
	if g.NamedInputs, err = grantNamedInputs(f.inputs); err != nil {
		return nil, err
	}
	if g.GrantID == "" {
		if g.GrantID = grants.GrantIDFor(f.agent); g.GrantID == "" {
			return nil, fmt.Errorf("agent id %q gives no usable grant id: name one with --id", f.agent)
		}
	}
	if err := grants.Validate(g); err != nil {
		return nil, err
	}
	return g, nil
}

// grantApplyPreset fills g's may_read, may_write and (when unset) role
// from the named preset, for the deliverables where the protocol keeps
// them; deliverables outside the folder are noted on stderr.
func grantApplyPreset(cmd *cobra.Command, info *protocol.Protocol, preset string, g *grants.Grant) error {
	deliv := info.Dir()
	if info.External() {
		deliv = externalPresetDir(info)
		if deliv == "-" {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: the deliverables are external to the folder; the preset covers only the protocol files\n")
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: the deliverables are beside the folder (%s/): a view shows them when it is rooted at the repository (--view-root repo)\n", deliv)
		}
	}
	p, err := grants.Preset(preset, deliv)
	if err != nil {
		return err
	}
	g.MayRead, g.MayWrite = p.MayRead, p.MayWrite
	if g.Role == "" {
		g.Role = p.Name
	}
	return nil
}

// grantNamedInputs parses the --input slot=path flags (nil for none).
func grantNamedInputs(inputs []string) (map[string]grants.NamedInput, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	named := map[string]grants.NamedInput{}
	for _, in := range inputs {
		slot, p, ok := strings.Cut(in, "=")
		if !ok || slot == "" {
			return nil, fmt.Errorf("--input %q: want slot=path", in)
		}
		named[slot] = grants.NamedInput{Path: p, Required: true}
	}
	return named, nil
}

// grantCreateInRunDir saves g in the run directory runs, refusing an id in
// use and a second active grant for the agent, and records its creation.
func grantCreateInRunDir(cmd *cobra.Command, runs string, g *grants.Grant) error {
	rd := grants.NewRunDir(runs)
	existing, _ := rd.LoadGrants() // problems of other grants do not block this one
	if err := grantCheckNewID(rd, existing, g); err != nil {
		return err
	}
	if gf, ok := grants.ActiveGrantFor(existing, g.AgentID); ok {
		return fmt.Errorf("agent %q already has an active grant %s (%s); revoke it first (acpfs grant revoke --runs %s --grant %s)",
			g.AgentID, gf.Grant.GrantID, gf.Path, rd.Root, gf.Grant.GrantID)
	}
	if err := initRunDir(cmd.ErrOrStderr(), rd); err != nil {
		return err
	}
	if err := rd.SaveGrant(g); err != nil {
		return err
	}
	detail := fmt.Sprintf("role %q, participant %s, %d may_read, %d may_write, %d forbidden_read",
		g.Role, g.ParticipantID(), len(g.MayRead), len(g.MayWrite), len(g.ForbiddenRead))
	if err := grantRecord(rd, ledger.Record{Kind: ledger.KindGrantCreated, Agent: g.AgentID, Grant: g.GrantID, Detail: detail}); err != nil {
		return fmt.Errorf("grant %s was written but not recorded: %w", g.GrantID, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "created %s for agent %s (participant %s)\n", g.GrantID, g.AgentID, g.ParticipantID())
	fmt.Fprintf(out, "  grant:  %s\n  prompt: %s\n", rd.GrantPath(g.GrantID), rd.PromptPath(g.GrantID))
	return nil
}

// grantCheckNewID refuses a grant id that the run directory already
// holds, whether or not its file loads, and suggests a free one.
func grantCheckNewID(rd grants.RunDir, existing []grants.GrantFile, g *grants.Grant) error {
	taken := func(id string) bool {
		if _, err := os.Lstat(rd.GrantPath(id)); err == nil {
			return true
		}
		return slices.ContainsFunc(existing, func(gf grants.GrantFile) bool { return gf.Grant.GrantID == id })
	}
	if !taken(g.GrantID) {
		return nil
	}
	what := ""
	for _, gf := range existing {
		if gf.Grant.GrantID == g.GrantID {
			state := "active"
			if gf.Grant.Revoked {
				state = "revoked"
			}
			what = fmt.Sprintf(", %s, agent %s", state, gf.Grant.AgentID)
			if gf.Grant.AgentID == g.AgentID && !gf.Grant.Revoked {
				what += "; an agent holds one active grant, so revoke it first"
			}
		}
	}
	free := g.GrantID
	for n := 2; taken(free); n++ {
		free = fmt.Sprintf("%s-%d", g.GrantID, n)
	}
	return fmt.Errorf("grant %s already exists (%s%s); give the new grant another id with --id, e.g. --id %s",
		g.GrantID, rd.GrantPath(g.GrantID), what, free)
}

// grantAppendNew appends the entries of more that base lacks.
func grantAppendNew(base, more []string) []string {
	for _, m := range more {
		if !slices.Contains(base, m) {
			base = append(base, m)
		}
	}
	return base
}

func newGrantCheckCmd() *cobra.Command {
	var runs, folder string
	cmd := &cobra.Command{
		Use:   "check [--folder F]",
		Short: "Validate every grant of a run directory (and, with --folder, against the collaboration)",
		Long: `check loads every grant and applies the single-grant rules and the set
rules (unique ids, one active grant per agent). With --folder it also
checks that each active grant's participant is listed in protocol.json
(an error) and that named inputs exist (a warning).
Exit status: 0 all valid, 1 valid with warnings, 2 problems found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return grantCheck(cmd.OutOrStdout(), grants.NewRunDir(runs), folder)
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().StringVar(&folder, "folder", "", "collaboration folder to check the grants against")
	return cmd
}

func grantCheck(out io.Writer, rd grants.RunDir, folder string) error {
	gs, loadErr := rd.LoadGrants()
	var problems, warnings []string
	if loadErr != nil {
		problems = append(problems, strings.Split(loadErr.Error(), "\n")...)
	}
	if folder != "" {
		info, err := grantReadProtocol(folder)
		if err != nil {
			return withCode(exitFailed, err)
		}
		hidden, err := rd.HiddenIn(folder)
		if err != nil {
			problems = append(problems, err.Error())
		}
		for _, gf := range gs {
			g := gf.Grant
			if g.Revoked {
				continue
			}
			if err := grantCheckParticipant(info, folder, g.ParticipantID()); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", gf.Path, err))
			}
			if _, err := grants.Compile(g, grants.MatcherOptions{Hidden: hidden}); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", gf.Path, err))
			}
			// What acpfs up would refuse: a grant that shows the run
			// directory (or one of its parts) lying inside the folder.
			if err := mount.CheckConcealed(folder, []string{rd.Root, rd.GrantsDir(), rd.HandoffsDir(), rd.ArtifactsDir(), filepath.Dir(rd.LedgerPath())}, g); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", gf.Path, err))
			}
			for _, slot := range grantSortedSlots(g) {
				p := g.NamedInputs[slot].Path
				if _, err := os.Stat(filepath.Join(folder, filepath.FromSlash(p))); err != nil {
					warnings = append(warnings, fmt.Sprintf("%s: named_inputs.%s: %s does not exist in the folder", gf.Path, slot, p))
				}
			}
		}
	}
	for _, gf := range gs {
		state := "active"
		if gf.Grant.Revoked {
			state = "revoked"
		}
		fmt.Fprintf(out, "ok %s  agent %s  participant %s  %s\n", gf.Grant.GrantID, gf.Grant.AgentID, gf.Grant.ParticipantID(), state)
	}
	for _, w := range warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	for _, p := range problems {
		fmt.Fprintf(out, "problem: %s\n", p)
	}
	switch {
	case len(problems) > 0:
		return withCode(exitFailed, fmt.Errorf("%d grant problem(s) in %s", len(problems), rd.Root))
	case len(warnings) > 0:
		return silentExit(exitWarnings)
	case len(gs) == 0:
		fmt.Fprintf(out, "no grants in %s\n", rd.GrantsDir())
	}
	return nil
}

func grantSortedSlots(g *grants.Grant) []string {
	var slots []string
	for s, in := range g.NamedInputs {
		if in.Path != "" {
			slots = append(slots, s)
		}
	}
	slices.Sort(slots)
	return slots
}

// grantFind finds the grant named by --grant or the argument (see
// grantRef), and returns it with its file's path.
func grantFind(rd grants.RunDir, flag string, args []string) (*grants.Grant, string, error) {
	ref, err := grantRef(flag, args)
	if err != nil {
		return nil, "", err
	}
	return rd.FindGrant(ref)
}

// grantRef takes the grant from --grant or, failing that, the only
// positional argument.
func grantRef(flag string, args []string) (string, error) {
	switch {
	case flag != "" && len(args) == 0:
		return flag, nil
	case flag == "" && len(args) == 1:
		return args[0], nil
	}
	return "", errors.New("name one grant, with --grant G-<id> (or a path)")
}

func newGrantRenderCmd() *cobra.Command {
	var runs, ref string
	cmd := &cobra.Command{
		Use:   "render --grant G",
		Short: "Print a grant's prompt (G is a grant id or the path of a grant file)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, _, err := grantFind(grants.NewRunDir(runs), ref, args)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), grants.Render(g))
			return nil
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().StringVar(&ref, "grant", "", "grant id or grant file")
	return cmd
}

// grantListEntry is one element of grant list --json.
type grantListEntry struct {
	Path  string        `json:"path"`
	Grant *grants.Grant `json:"grant"`
}

func newGrantListCmd() *cobra.Command {
	var runs string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the grants of a run directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rd := grants.NewRunDir(runs)
			gs, loadErr := rd.LoadGrants()
			out := cmd.OutOrStdout()
			if asJSON {
				entries := make([]grantListEntry, 0, len(gs))
				for _, gf := range gs {
					entries = append(entries, grantListEntry{Path: gf.Path, Grant: gf.Grant})
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return listed(enc.Encode(entries), loadErr)
			}
			rows := [][]string{{"GRANT", "AGENT", "PARTICIPANT", "ROLE", "STATE", "CREATED"}}
			for _, gf := range gs {
				g := gf.Grant
				state := "active"
				if g.Revoked {
					state = "revoked " + g.RevokedAt
				}
				rows = append(rows, []string{g.GrantID, g.AgentID, g.ParticipantID(), oneLineRole(g.Role), state, g.CreatedAt})
			}
			return listed(printTable(out, rows), loadErr)
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func oneLineRole(s string) string { return strings.Join(strings.Fields(s), " ") }

func newGrantRevokeCmd() *cobra.Command {
	var runs, ref, reason string
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "revoke --grant G [--reason TEXT]",
		Short: "Revoke a grant (live views stop showing anything) and record grant_revoked",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sf.set() {
				r, err := grantRef(ref, args)
				if err != nil {
					return err
				}
				return grantRevokeInStore(cmd, sf, r)
			}
			rd := grants.NewRunDir(runs)
			g, p, err := grantFind(rd, ref, args)
			if err != nil {
				return err
			}
			if want := rd.GrantPath(g.GrantID); filepath.Clean(p) != filepath.Clean(want) {
				return fmt.Errorf("%s is not the run directory's copy of %s (%s)", p, g.GrantID, want)
			}
			out := cmd.OutOrStdout()
			if g.Revoked {
				fmt.Fprintf(out, "%s was already revoked at %s\n", g.GrantID, g.RevokedAt)
				return nil
			}
			g.Revoked, g.RevokedAt = true, grantRevokedNow()
			if err := rd.SaveGrant(g); err != nil {
				return err
			}
			detail := "revoked"
			if reason != "" {
				detail = "revoked: " + reason
			}
			if err := grantRecord(rd, ledger.Record{Kind: ledger.KindGrantRevoked, Agent: g.AgentID, Grant: g.GrantID, Detail: detail}); err != nil {
				return fmt.Errorf("grant %s was revoked but not recorded: %w", g.GrantID, err)
			}
			fmt.Fprintf(out, "revoked %s (agent %s) at %s\n", g.GrantID, g.AgentID, g.RevokedAt)
			return nil
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().StringVar(&ref, "grant", "", "grant id or grant file")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the ledger")
	sf.register(cmd)
	cmd.Flags().Lookup("host").Hidden = true
	return cmd
}

// externalPresetDir names external deliverables' directory as a grant
// does, beside the folder ("../deliverables"), or is "-" when it cannot
// (an absolute repository root, or deliverables in the repository's root
// itself, which a preset would not give away whole).
func externalPresetDir(p *protocol.Protocol) string {
	dir, ok := p.ExternalDir()
	if !ok {
		return "-"
	}
	if up, rest := grants.SplitUp(dir); up == 0 || rest == "" || strings.Contains(rest, "..") {
		return "-"
	}
	return dir
}
