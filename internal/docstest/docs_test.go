package docstest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cmdTimeout bounds one command: a hang fails the document.
var cmdTimeout = 2 * time.Minute

const (
	// A "Ctrl-C" command is interrupted once its output has not grown for
	// followQuiet (a reader who saw what there was to see), or after
	// followMax.
	followQuiet = 2 * time.Second
	followMax   = 60 * time.Second
	// listenWait bounds the wait for a background server's address.
	listenWait = 60 * time.Second
)

// TestDocs runs the shell blocks of README.md, docs/*.md and
// examples/*/README.md as written, each document in a fresh copy of the
// repository (see the package documentation for the conventions). With -v
// it lists every command with its time, and the skipped blocks with their
// reasons.
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every command of the documentation; skipped with -short")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash is needed to run the documentation's commands: %v", err)
	}
	repo := moduleRoot(t)
	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob(filepath.Join(repo, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	more = append(more, examples...)
	sort.Strings(more)
	for _, m := range more {
		rel, err := filepath.Rel(repo, m)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, rel)
	}
	files := repoFiles(t, repo)

	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	netns := netnsWorks()
	if !netns {
		t.Log("no network namespace available (unshare --net): the documents run one at a time, on this machine's ports")
	}
	workspaceFor := func(i int) *workspace {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i))
		return &workspace{root: dir, clone: filepath.Join(dir, "repo"), bin: bin, files: files, src: repo, netns: netns,
			env: sessionEnv(t, bin, filepath.Join(dir, "home"), filepath.Join(dir, "tmp"))}
	}
	// drover on PATH is built by "go run" from a copy at the path of the
	// README's copy, so that the README's own "go run" and "go build" find
	// it in the build cache.
	w0 := workspaceFor(0)
	w0.fresh(t)
	build := exec.Command("go", "run", "-exec", "cp", "./cmd/drover", filepath.Join(bin, "drover"))
	build.Dir = w0.clone
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build drover: %v\n%s", err, out)
	}

	for i, doc := range docs {
		t.Run(doc, func(t *testing.T) {
			// Each document has a network namespace of its own, so they
			// can run at once despite their fixed ports.
			if netns {
				t.Parallel()
			}
			src, err := os.ReadFile(filepath.Join(repo, doc))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseDoc(string(src))
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			n := 0
			for _, b := range blocks {
				if b.skip == "" {
					n += len(b.cmds)
				}
			}
			if n == 0 {
				for _, b := range blocks {
					t.Logf("%s:%d: skipped block: %s", doc, b.line, b.skip)
				}
				return
			}
			w := workspaceFor(i)
			w.fresh(t)
			if err := runDoc(t, w, doc, blocks); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// workspace is where the documents run: a fresh copy of the repository
// for each, a bin directory with drover, and the session's environment.
type workspace struct {
	root, clone, bin, src string
	files                 []string
	env                   []string
	netns                 bool
}

// fresh replaces the copy of the repository and the home and temporary
// directories with fresh ones.
func (w *workspace) fresh(t *testing.T) {
	t.Helper()
	for _, d := range []string{w.clone, filepath.Join(w.root, "home"), filepath.Join(w.root, "tmp"), filepath.Join(w.root, "out")} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(w.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range w.files {
		if err := copyFile(filepath.Join(w.src, f), filepath.Join(w.clone, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// repoFiles lists what a clone of the repository holds: the tracked files
// and the new ones git does not ignore (so that uncommitted work is run
// too), without build outputs.
func repoFiles(t *testing.T, repo string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files (the test copies the repository's files as a clone has them; it needs git and the repository): %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(repo, f)); err != nil {
			continue // deleted in the work tree
		}
		files = append(files, f)
	}
	return files
}

func copyFile(src, dst string) error {
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm())
}

// sessionEnv is the documents' environment: a new HOME, drover first on
// PATH, the Go toolchain and caches of this test, and nothing of drover's
// own variables (DROVER_*), as on a machine that has just cloned drover.
func sessionEnv(t *testing.T, bin, home, tmp string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	g := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(g) != 4 {
		t.Fatalf("go env: %q", out)
	}
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + filepath.Join(g[0], "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home, "TMPDIR=" + tmp, "TERM=dumb",
		"GOPATH=" + g[1], "GOCACHE=" + g[2], "GOMODCACHE=" + g[3], "GOTOOLCHAIN=local",
	}
	for _, k := range []string{"LANG", "LC_ALL", "CC", "CGO_ENABLED", "GOFLAGS", "GOPROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// netnsWorks reports whether commands can run in a network namespace of
// their own with a loopback interface.
func netnsWorks() bool {
	return exec.Command("unshare", "--net", "--map-root-user", "--", "sh", "-c", "ip link set lo up").Run() == nil
}

// The bash side of a session: it reads requests from fd 3 (operation,
// argument, command; each ending with a NUL byte) and answers each with one
// line on fd 4. Job control (set -m) puts every background command in a
// process group of its own, which the interrupt and the clean-up signal.
const sessionScript = `
set -m
exec </dev/null
__dt_bg=()
__dt_say() { printf '%s\n' "$*" >&4; }
__dt_alive() { kill -0 "$1" 2>/dev/null; }
while IFS= read -r -d '' __dt_op <&3 && IFS= read -r -d '' __dt_arg <&3 && IFS= read -r -d '' __dt_cmd <&3; do
	case $__dt_op in
	run)
		__dt_prev=$!
		{ eval "$__dt_cmd"; } >"$__dt_arg" 2>&1
		__dt_status=$?
		if [[ "$!" != "$__dt_prev" ]]; then __dt_bg+=("$!"); __dt_say "bg $!"; fi
		__dt_say "status $__dt_status"
		;;
	follow)
		# Its quiet is that of its standard output: what a reader watches
		# (curl's progress meter, say, goes to standard error).
		{ eval "$__dt_cmd"; } >"$__dt_arg" 2>"$__dt_arg.err" &
		__dt_p=$! __dt_i=0 __dt_quiet=0 __dt_size=0 __dt_how=exited
		while __dt_alive $__dt_p && (( __dt_i < __DT_FOLLOW_MAX && __dt_quiet < __DT_FOLLOW_QUIET )); do
			sleep 0.1; ((__dt_i++, __dt_quiet++))
			__dt_now=$(stat -c %s "$__dt_arg")
			if [[ $__dt_now != "$__dt_size" ]]; then __dt_size=$__dt_now __dt_quiet=0; fi
		done
		if __dt_alive $__dt_p; then
			__dt_how=interrupted
			kill -INT -- -$__dt_p
			__dt_i=0
			while __dt_alive $__dt_p && (( __dt_i < 100 )); do sleep 0.1; ((__dt_i++)); done
			if __dt_alive $__dt_p; then __dt_how=killed; kill -KILL -- -$__dt_p; fi
		fi
		wait $__dt_p
		__dt_say "status $? $__dt_how"
		;;
	listen)
		read -r __dt_host __dt_port <<<"$__dt_arg"
		__dt_i=0 __dt_how=timeout
		while (( __dt_i < __DT_LISTEN_TICKS )); do
			if (exec 9<>"/dev/tcp/$__dt_host/$__dt_port") 2>/dev/null; then __dt_how=ok; break; fi
			if ! __dt_alive "$__dt_cmd"; then __dt_how=exited; break; fi
			sleep 0.1; ((__dt_i++))
		done
		__dt_say "listen $__dt_how"
		;;
	check)
		__dt_keep=()
		for __dt_p in "${__dt_bg[@]}"; do
			if __dt_alive $__dt_p; then __dt_keep+=("$__dt_p"); else wait $__dt_p; __dt_say "bgexit $__dt_p $?"; fi
		done
		__dt_bg=("${__dt_keep[@]}")
		__dt_say "checked"
		;;
	stop)
		for __dt_p in "${__dt_bg[@]}"; do kill -TERM -- -$__dt_p 2>/dev/null; done
		__dt_i=0
		for __dt_p in "${__dt_bg[@]}"; do
			while __dt_alive $__dt_p && (( __dt_i < 100 )); do sleep 0.1; ((__dt_i++)); done
			kill -KILL -- -$__dt_p 2>/dev/null
		done
		__dt_say "stopped"
		exit 0
		;;
	esac
done
`

// session is one bash process running a document's commands.
type session struct {
	cmd     *exec.Cmd
	ctl     io.WriteCloser
	replies chan string
	shell   *lockedBuffer // bash's own output (job notices)
	broken  bool          // a request got no answer: bash is busy or gone
	done    bool
}

// lockedBuffer is a bytes.Buffer that exec's copier writes while the
// session reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startSession(t *testing.T, w *workspace) *session {
	t.Helper()
	script := filepath.Join(w.root, "session.sh")
	if err := os.WriteFile(script, []byte(sessionScript), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"bash", "--noprofile", "--norc", script}
	if w.netns {
		args = append([]string{"unshare", "--net", "--map-root-user", "--", "bash", "--noprofile", "--norc", "-c", `ip link set lo up && exec "$@"`, "bash"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = w.clone
	cmd.Env = append(w.env,
		"__DT_FOLLOW_QUIET="+strconv.Itoa(int(followQuiet/(100*time.Millisecond))),
		"__DT_FOLLOW_MAX="+strconv.Itoa(int(followMax/(100*time.Millisecond))),
		"__DT_LISTEN_TICKS="+strconv.Itoa(int(listenWait/(100*time.Millisecond))))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{cmd: cmd, ctl: ctlW, replies: make(chan string, 16), shell: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = s.shell, s.shell
	cmd.ExtraFiles = []*os.File{ctlR, repW} // fd 3 and fd 4
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctlR.Close()
	repW.Close()
	go func() {
		sc := bufio.NewScanner(repR)
		for sc.Scan() {
			s.replies <- sc.Text()
		}
		close(s.replies)
	}()
	t.Cleanup(s.kill)
	return s
}

// send makes one request and returns the reply lines up to the one that
// starts with final, or an error when none comes within d.
func (s *session) send(op, arg, command, final string, d time.Duration) ([]string, error) {
	if _, err := fmt.Fprintf(s.ctl, "%s\x00%s\x00%s\x00", op, arg, command); err != nil {
		return nil, fmt.Errorf("the session ended: %w; its output:\n%s", err, s.shell)
	}
	var lines []string
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-s.replies:
			if !ok {
				return lines, fmt.Errorf("the session ended; its output:\n%s", s.shell)
			}
			lines = append(lines, l)
			if strings.HasPrefix(l, final) {
				return lines, nil
			}
		case <-timer.C:
			s.broken = true
			return lines, errTimeout
		}
	}
}

var errTimeout = errors.New("timed out")

// stop asks bash to stop the background commands (SIGTERM, then SIGKILL)
// and exit, then kills whatever is left.
func (s *session) stop() {
	if !s.broken {
		_, _ = s.send("stop", "", "", "stopped", 30*time.Second)
	}
	s.kill()
}

// kill ends bash and every process it started that is still running: a
// command that hung, or background commands when bash could not stop
// them. Job control gives them process groups of their own, so they are
// found as bash's descendants, before bash goes (then they would be
// orphans).
func (s *session) kill() {
	if s.done {
		return
	}
	s.done = true
	killed := descendants(s.cmd.Process.Pid)
	for _, pid := range killed {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// bash is not reaped yet (Wait is below), so the pid is still its.
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	s.ctl.Close()
	_ = s.cmd.Wait()
	// SIGKILL is delivered asynchronously: on a busy machine a killed
	// process can run on for a moment. Wait until each is dead, so that a
	// port or file it held is free when kill returns.
	waitDead(killed, 10*time.Second)
}

// waitDead waits until every pid has exited (gone, or a zombie waiting to
// be reaped), or d has passed.
func waitDead(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
			if err != nil {
				break
			}
			i := bytes.LastIndexByte(stat, ')')
			if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// background is a command left running in the background.
type background struct {
	pid  int
	at   string // FILE:LINE
	text string
	out  string // its output file
}

var listenRe = regexp.MustCompile(`--(?:metrics-)?listen[ =]([^\s'"]+)`)

// runDoc runs the commands of blocks in one session. It stops at the first
// failure and returns it, with the file, the lines and the output.
func runDoc(t *testing.T, w *workspace, doc string, blocks []block) error {
	s := startSession(t, w)
	defer s.stop()
	var bgs []*background
	n := 0
	outFile := func() string {
		n++
		return filepath.Join(w.root, "out", fmt.Sprintf("%03d.txt", n))
	}
	failure := func(at, text, what, out string) error {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %s\n    %s\n", at, what, strings.ReplaceAll(text, "\n", "\n    "))
		fmt.Fprintf(&b, "--- its output:\n%s", tail(readFile(out), 60))
		for _, bg := range bgs {
			fmt.Fprintf(&b, "--- output of the background command at %s (%s):\n%s", bg.at, firstLine(bg.text), tail(readFile(bg.out), 25))
		}
		return errors.New(b.String())
	}
	// checkBackground fails when a background command exited by itself
	// with a failure.
	checkBackground := func() error {
		lines, err := s.send("check", "", "", "checked", 30*time.Second)
		if err != nil {
			return fmt.Errorf("checking the background commands: %w", err)
		}
		for _, l := range lines {
			var pid, code int
			if _, err := fmt.Sscanf(l, "bgexit %d %d", &pid, &code); err != nil {
				continue
			}
			for i, bg := range bgs {
				if bg.pid != pid {
					continue
				}
				bgs = append(bgs[:i], bgs[i+1:]...)
				// 0, or stopped by SIGINT or SIGTERM (a command of the document).
				if code != 0 && code != 130 && code != 143 {
					return failure(bg.at, bg.text, fmt.Sprintf("this background command exited with status %d", code), bg.out)
				}
				break
			}
		}
		return nil
	}
	for _, b := range blocks {
		if b.skip != "" {
			t.Logf("%s:%d: skipped block (%d commands): %s", doc, b.line, len(b.cmds), b.skip)
			continue
		}
		for _, c := range b.cmds {
			at := fmt.Sprintf("%s:%d (block at line %d)", doc, c.line, b.line)
			out := outFile()
			start := time.Now()
			op := "run"
			if strings.Contains(c.text, "Ctrl-C") {
				op = "follow"
			}
			lines, err := s.send(op, out, c.text, "status ", cmdTimeout)
			if err != nil {
				return failure(at, c.text, fmt.Sprintf("no exit within %s (%v)", cmdTimeout, err), out)
			}
			took := time.Since(start).Round(time.Millisecond)
			f := strings.Fields(lines[len(lines)-1])
			code, _ := strconv.Atoi(f[1])
			how := "exited"
			if len(f) > 2 {
				how = f[2]
			}
			switch {
			case how == "killed":
				return failure(at, c.text, "did not stop on SIGINT (Ctrl-C) within 10s", out)
			case how == "interrupted" && code != 0 && code != 130:
				return failure(at, c.text, fmt.Sprintf("exit status %d on SIGINT (Ctrl-C), want 0 or 130", code), out)
			case how == "exited" && code != 0:
				return failure(at, c.text, fmt.Sprintf("exit status %d after %s", code, took), out)
			}
			t.Logf("%s: ok in %s: %s", at, took, firstLine(c.text))
			for _, l := range lines {
				var pid int
				if _, err := fmt.Sscanf(l, "bg %d", &pid); err != nil {
					continue
				}
				bgs = append(bgs, &background{pid: pid, at: at, text: c.text, out: out})
				for _, m := range listenRe.FindAllStringSubmatch(c.text, -1) {
					host, port, err := net.SplitHostPort(m[1])
					if err != nil || port == "0" {
						continue
					}
					if host == "" || host == "localhost" {
						host = "127.0.0.1"
					}
					r, err := s.send("listen", host+" "+port, strconv.Itoa(pid), "listen ", listenWait+10*time.Second)
					if err != nil || r[len(r)-1] != "listen ok" {
						if cerr := checkBackground(); cerr != nil {
							return cerr
						}
						return failure(at, c.text, fmt.Sprintf("the background command does not accept connections on %s:%s (%v %v)", host, port, r, err), out)
					}
				}
			}
			if err := checkBackground(); err != nil {
				return err
			}
		}
	}
	return checkBackground()
}

// readFile returns a command's output file, with the standard error a
// "Ctrl-C" command wrote to the file beside it.
func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)\n", path, err)
	}
	if e, err := os.ReadFile(path + ".err"); err == nil && len(e) > 0 {
		b = append(append(b, "--- its standard error:\n"...), e...)
	}
	return string(b)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[… %d lines before]\n", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	out := strings.Join(lines, "")
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out
}

func firstLine(s string) string {
	l, _, more := strings.Cut(s, "\n")
	if more {
		l += " …"
	}
	return l
}
