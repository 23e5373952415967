package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// TestReadme runs the shell examples of README.md, so that the README and
// acpfs cannot drift apart.
//
// Every fenced block marked sh (or bash, shell) runs, in the README's
// order, with `bash -e -o pipefail` in one fresh directory, the freshly
// built acpfs first on the PATH: each command must succeed as written.
// Blocks share the directory, not the shell: a block is one script.
//
// An HTML comment on the line before a block (blank lines between are
// allowed) changes how it runs. There are two, to be used sparingly:
//
//	<!-- readme-test: skip -->
//	    The block is not run. For commands that cannot run here at all:
//	    the quick start's make targets, which build the repository and run
//	    this very suite.
//
//	<!-- readme-test: background -->
//	    The block is a command that stays in the foreground until it is
//	    stopped (acpfs mount, acpfs up). It is started in the background,
//	    and the next block runs once it has printed its first line (both
//	    print one when their mounts are ready). It may end by itself (a
//	    later `acpfs umount`); if not, it gets SIGTERM when the README is
//	    done, as the README says it may. Either way it must exit 0, and
//	    the test waits for every process it started. Keep such a block to
//	    one command: bash then runs it in place, so the signal and the
//	    exit status are the command's own.
//
// Anything else after "readme-test:" is an error, as is a marker that is
// not followed by a shell block. Text after the keyword is a comment.
//
// The README's `acpfs run` blocks run their agents for real: a reviewer
// that writes review.md and appends its event through its sandbox.
//
// Every mount the README makes lies in the test's directory. When the
// test ends, background commands are stopped first; a mount still there
// afterwards is a failure (the README would leave it behind on a user's
// machine too), and is unmounted.
func TestReadme(t *testing.T) {
	testutil.RequireFUSE(t)
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	blocks, err := parseReadme(string(data))
	require.NoError(t, err)

	// If the README's format changed and nothing were extracted, the
	// test would pass for nothing: insist on the commands it documents.
	var ran strings.Builder
	for _, b := range blocks {
		if b.mode != readmeSkip {
			ran.WriteString(b.script)
		}
	}
	for _, want := range []string{"acpfs init", "acpfs grant create", "acpfs explain", "acpfs mount", "acpfs umount",
		"acpfs up", "acpfs run", "acpfs ledger verify", "acpfs audit"} {
		require.Contains(t, ran.String(), want, "no README block that runs %q was found", want)
	}

	work := newDir(t, "readme")
	r := &readmeRun{t: t, dir: work, env: readmeEnv(t)}
	// Cleanups run last-in first-out: this one, before newDir's removal.
	t.Cleanup(r.finish)
	for _, b := range blocks {
		switch b.mode {
		case readmeSkip:
			t.Logf("README.md:%d: skipped", b.line)
		case readmeBackground:
			r.background(b)
		default:
			r.run(b)
		}
	}
}

// readmeMode says how a README block runs.
type readmeMode string

const (
	readmeRunIt      readmeMode = ""
	readmeSkip       readmeMode = "skip"
	readmeBackground readmeMode = "background"
)

// readmeBlock is one shell block of the README.
type readmeBlock struct {
	line   int // of the opening fence, counting from 1
	mode   readmeMode
	script string
}

var (
	readmeFence  = regexp.MustCompile("^```+\\s*([A-Za-z0-9_+-]*)\\s*$")
	readmeMarker = regexp.MustCompile(`^<!--\s*readme-test:\s*(\S+)(.*)-->\s*$`)
)

// parseReadme extracts the shell blocks of a Markdown text, with the
// markers that apply to them.
func parseReadme(text string) ([]readmeBlock, error) {
	var blocks []readmeBlock
	lines := strings.Split(text, "\n")
	pending, pendingLine := readmeRunIt, 0 // a marker waiting for its block
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], "\r")
		if m := readmeMarker.FindStringSubmatch(line); m != nil {
			if pendingLine != 0 {
				return nil, fmt.Errorf("README.md:%d: marker not followed by a shell block", pendingLine)
			}
			switch mode := readmeMode(strings.TrimRight(m[1], ":")); mode {
			case readmeSkip, readmeBackground:
				pending, pendingLine = mode, i+1
			default:
				return nil, fmt.Errorf("README.md:%d: unknown readme-test marker %q (want skip or background)", i+1, m[1])
			}
			continue
		}
		if strings.HasPrefix(line, "<!--") && strings.Contains(line, "readme-test") {
			return nil, fmt.Errorf("README.md:%d: malformed readme-test marker (want <!-- readme-test: skip|background -->)", i+1)
		}
		m := readmeFence.FindStringSubmatch(line)
		if m == nil {
			if strings.TrimSpace(line) != "" && pendingLine != 0 {
				return nil, fmt.Errorf("README.md:%d: marker not followed by a shell block", pendingLine)
			}
			continue
		}
		// A fenced block: find its end.
		fence := line[:len(line)-len(strings.TrimLeft(line, "`"))]
		start := i
		var body []string
		for i++; i < len(lines); i++ {
			l := strings.TrimRight(lines[i], "\r")
			if strings.HasPrefix(l, fence) && strings.TrimSpace(strings.TrimLeft(l, "`")) == "" {
				break
			}
			body = append(body, l)
		}
		if i == len(lines) {
			return nil, fmt.Errorf("README.md:%d: code block never closed", start+1)
		}
		switch m[1] {
		case "sh", "bash", "shell":
			blocks = append(blocks, readmeBlock{line: start + 1, mode: pending, script: strings.Join(body, "\n") + "\n"})
		default:
			if pendingLine != 0 {
				return nil, fmt.Errorf("README.md:%d: marker not followed by a shell block", pendingLine)
			}
		}
		pending, pendingLine = readmeRunIt, 0
	}
	if pendingLine != 0 {
		return nil, fmt.Errorf("README.md:%d: marker not followed by a shell block", pendingLine)
	}
	return blocks, nil
}

// readmeEnv returns the environment of the README's commands: a PATH
// that starts with a directory holding acpfs.
func readmeEnv(t *testing.T) []string {
	t.Helper()
	bin, err := os.MkdirTemp("", "acpfs-readme-bin-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(bin) })
	require.NoError(t, os.Symlink(acpfsBin, filepath.Join(bin, "acpfs")))
	require.NoError(t, os.Symlink(filepath.Join(tmpRoot, "acpfs-nats"), filepath.Join(bin, "acpfs-nats")))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Limits that turn a hang into a failure. They are never waited out when
// things work: each wait ends on the event it waits for.
const (
	readmeBlockTimeout = 3 * time.Minute // one foreground block
	readmeReadyTimeout = 2 * time.Minute // a background block's first line
	readmeStopTimeout  = time.Minute     // a background block's exit after SIGTERM
)

// readmeRun runs the blocks of one README in one directory.
type readmeRun struct {
	t   *testing.T
	dir string
	env []string
	bg  []*readmeProc
}

// readmeProc is a background block.
type readmeProc struct {
	b      readmeBlock
	cmd    *exec.Cmd
	out    testutil.SyncBuffer
	ready  chan struct{} // closed at the first line on stdout
	exited chan struct{} // closed once every process of the block is gone
	err    error         // of Wait, set before exited is closed
}

func (r *readmeRun) command(ctx context.Context, b readmeBlock) *exec.Cmd {
	// -x prints each command before it runs, so that a failure shows
	// which line of the block failed.
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-x", "-c", b.script)
	cmd.Dir, cmd.Env = r.dir, r.env
	// Its own process group, so that everything it started can be
	// signalled at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// run runs a block to completion.
func (r *readmeRun) run(b readmeBlock) {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readmeBlockTimeout)
	defer cancel()
	cmd := r.command(ctx, b)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("README.md:%d:\n%s", b.line, out.String())
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", readmeBlockTimeout, err)
	}
	if err != nil {
		t.Fatalf("README.md:%d: block failed: %v\n--- block ---\n%s--- output ---\n%s%s", b.line, err, b.script, out.String(), r.backgroundOutput())
	}
}

// background starts a block and returns once it printed its first line.
func (r *readmeRun) background(b readmeBlock) {
	t := r.t
	t.Helper()
	p := &readmeProc{b: b, ready: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = r.command(context.Background(), b)
	// Wait returns only when both pipes are closed, that is when every
	// process that inherited them has exited, grandchildren included.
	p.cmd.Stdout = &readmeFirstLine{w: &p.out, ready: p.ready}
	p.cmd.Stderr = &p.out
	require.NoError(t, p.cmd.Start())
	r.bg = append(r.bg, p)
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(readmeReadyTimeout)
	defer timer.Stop()
	select {
	case <-p.ready:
		t.Logf("README.md:%d: running in the background:\n%s", b.line, p.out.String())
	case <-p.exited:
		t.Fatalf("README.md:%d: background block exited before printing anything (%v)\n--- block ---\n%s--- output ---\n%s",
			b.line, p.err, b.script, p.out.String())
	case <-timer.C:
		t.Fatalf("README.md:%d: background block printed nothing in %v\n--- block ---\n%s--- output ---\n%s",
			b.line, readmeReadyTimeout, b.script, p.out.String())
	}
}

// backgroundOutput is what the background blocks printed so far, for
// failure messages.
func (r *readmeRun) backgroundOutput() string {
	var s strings.Builder
	for _, p := range r.bg {
		fmt.Fprintf(&s, "--- output of the background block at README.md:%d ---\n%s", p.b.line, p.out.String())
	}
	return s.String()
}

// finish stops the background blocks, newest first, checks that each
// exited 0, and that no mount is left in the directory.
func (r *readmeRun) finish() {
	t := r.t
	for i := len(r.bg) - 1; i >= 0; i-- {
		p := r.bg[i]
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
		timer := time.NewTimer(readmeStopTimeout)
		select {
		case <-p.exited:
		case <-timer.C:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
			t.Errorf("README.md:%d: background block still running %v after SIGTERM", p.b.line, readmeStopTimeout)
		}
		timer.Stop()
		if p.err != nil {
			t.Errorf("README.md:%d: background block failed: %v\n--- block ---\n%s--- output ---\n%s", p.b.line, p.err, p.b.script, p.out.String())
		} else {
			t.Logf("README.md:%d: background block exited 0:\n%s", p.b.line, p.out.String())
		}
	}
	for _, m := range testutil.FUSEMounts(r.dir + "/") {
		t.Errorf("the README's commands left a mount at %s", m)
		out, err := exec.Command(acpfsBin, "umount", m).CombinedOutput()
		assert.NoError(t, err, "acpfs umount %s: %s", m, out)
	}
}

// readmeFirstLine passes output on and closes ready at the first newline.
type readmeFirstLine struct {
	w     *testutil.SyncBuffer
	ready chan struct{}
	once  sync.Once
}

func (f *readmeFirstLine) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if bytes.IndexByte(p, '\n') >= 0 {
		f.once.Do(func() { close(f.ready) })
	}
	return n, err
}

func TestReadmeParse(t *testing.T) {
	fence := "```"
	tests := []struct {
		name string
		text string
		want []readmeBlock
		err  string
	}{
		{
			name: "shell blocks in order, others left out",
			text: "# T\n\n" + fence + "sh\necho a\necho b\n" + fence + "\n\n" + fence + "json\n{}\n" + fence + "\n" +
				fence + "\nplain\n" + fence + "\n" + fence + "bash\necho c\n" + fence + "\n",
			want: []readmeBlock{{line: 3, script: "echo a\necho b\n"}, {line: 14, script: "echo c\n"}},
		},
		{
			name: "markers, with blank lines and a comment",
			text: "<!-- readme-test: skip (make runs the suite) -->\n" + fence + "sh\nmake test\n" + fence + "\n" +
				"<!-- readme-test: background -->\n\n" + fence + "sh\nacpfs up\n" + fence + "\n" + fence + "sh\nls\n" + fence + "\n",
			want: []readmeBlock{
				{line: 2, mode: readmeSkip, script: "make test\n"},
				{line: 7, mode: readmeBackground, script: "acpfs up\n"},
				{line: 10, script: "ls\n"},
			},
		},
		{
			name: "a marker inside a block is text",
			text: fence + "sh\n<!-- readme-test: skip -->\necho\n" + fence + "\n",
			want: []readmeBlock{{line: 1, script: "<!-- readme-test: skip -->\necho\n"}},
		},
		{
			name: "a longer fence holds a shorter one",
			text: "````sh\necho '```'\n````\n",
			want: []readmeBlock{{line: 1, script: "echo '```'\n"}},
		},
		{name: "unknown marker", text: "<!-- readme-test: sometimes -->\n" + fence + "sh\nx\n" + fence + "\n", err: `README.md:1: unknown readme-test marker "sometimes"`},
		{name: "malformed marker", text: "<!-- readme-test skip -->\n" + fence + "sh\nx\n" + fence + "\n", err: "README.md:1: malformed"},
		{name: "marker before text", text: "<!-- readme-test: skip -->\nSome text.\n" + fence + "sh\nx\n" + fence + "\n", err: "README.md:1: marker not followed by a shell block"},
		{name: "marker before another language", text: "<!-- readme-test: skip -->\n" + fence + "json\n{}\n" + fence + "\n", err: "README.md:1: marker not followed"},
		{name: "marker at the end", text: "text\n<!-- readme-test: background -->\n", err: "README.md:2: marker not followed"},
		{name: "unclosed block", text: "a\n" + fence + "sh\necho\n", err: "README.md:2: code block never closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseReadme(tt.text)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}

	// The README itself parses, and marks no more than it must.
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	blocks, err := parseReadme(string(data))
	require.NoError(t, err)
	marked := map[readmeMode]int{}
	for _, b := range blocks {
		marked[b.mode]++
	}
	assert.LessOrEqual(t, marked[readmeSkip], 1, "only the quick start's make targets are skipped")
	assert.LessOrEqual(t, marked[readmeBackground], 5,
		"only acpfs mount, acpfs up (one host, two hosts) and the several-hosts example's server run in the background")
	assert.GreaterOrEqual(t, marked[readmeRunIt], 5)
}
