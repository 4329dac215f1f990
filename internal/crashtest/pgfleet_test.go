package crashtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// badLineMarkers are log lines that mean a server stopped working without
// exiting, or crashed.
var badLineMarkers = []string{"stopping all roles", "role stopped", "panic:", "fatal error:", "DATA RACE"}

// pgProc is one `drover server` process on PostgreSQL.
type pgProc struct {
	id    string // --instance-id
	slot  int
	ready chan struct{}
	done  chan struct{}

	cmd     *exec.Cmd
	waitErr error // valid after done

	mu         sync.Mutex
	readyAt    time.Time
	recent     []string // last lines of its log
	bad        []string // lines matching badLineMarkers
	killed     bool     // SIGKILLed by the test
	terminated bool     // SIGTERMed by the test
}

const recentLines = 40

// pgFleet starts and tracks the servers of one test.
type pgFleet struct {
	t                        *testing.T
	bin, url, schema, remote string
	workflows                string // --workflows DIR; "" for none
	logw                     io.Writer

	mu   sync.Mutex
	all  []*pgProc
	apis map[int]serverAPI // slot → HTTP API of its latest ready process
}

// serverAPI is the HTTP API of a server process.
type serverAPI struct{ url, id string }

// api returns the HTTP API of a random slot's latest ready process (zero
// if none); that process may have died since.
func (f *pgFleet) api(rng func(int) int) serverAPI {
	f.mu.Lock()
	defer f.mu.Unlock()
	var list []serverAPI
	for slot := range clusterSize {
		if a, ok := f.apis[slot]; ok {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return serverAPI{}
	}
	return list[rng(len(list))]
}

// listenRE finds the HTTP API's address in a server's ready line.
var listenRE = regexp.MustCompile(`listen=(\S+)`)

func (f *pgFleet) start(slot int, id string) *pgProc {
	f.t.Helper()
	// Each process also serves the HTTP API (on a port it picks and names
	// in its ready line), so that the test submits through it too: a Submit
	// in a process with schedulers starts its task in the submitting
	// transaction (eager start), and these processes get killed.
	cmd := exec.Command(f.bin, "server", "--demo",
		"--listen", "127.0.0.1:0", "--insecure-no-auth",
		"--db", f.url,
		"--schema", f.schema,
		"--roles", "all",
		"--remote-url", f.remote,
		"--instance-id", id,
		"--step-timeout", "1s",
		"--supervisor-interval", "100ms",
		"--lease-ttl", "1s",
		"--schedulers", "2",
	)
	if f.workflows != "" {
		cmd.Args = append(cmd.Args, "--workflows", f.workflows)
	}
	// The flags name the database; nothing from the environment may.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DROVER_DATABASE_URL=") && !strings.HasPrefix(kv, "DROVER_SCHEMA=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		f.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &pgProc{id: id, slot: slot, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		f.t.Fatalf("start server %s: %v", id, err)
	}
	pw.Close()
	f.mu.Lock()
	f.all = append(f.all, p)
	delete(f.apis, slot)
	f.mu.Unlock()
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f.logw, id+": "+line)
			p.mu.Lock()
			p.recent = append(p.recent, line)
			if len(p.recent) > recentLines {
				p.recent = p.recent[len(p.recent)-recentLines:]
			}
			for _, m := range badLineMarkers {
				if strings.Contains(line, m) {
					p.bad = append(p.bad, line)
					break
				}
			}
			p.mu.Unlock()
			if strings.Contains(line, "drover server ready") {
				if m := listenRE.FindStringSubmatch(line); m != nil {
					f.mu.Lock()
					if f.apis == nil {
						f.apis = map[int]serverAPI{}
					}
					f.apis[slot] = serverAPI{url: "http://" + m[1], id: id}
					f.mu.Unlock()
				}
				once.Do(func() {
					p.mu.Lock()
					p.readyAt = time.Now()
					p.mu.Unlock()
					close(p.ready)
				})
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		<-scanned
		close(p.done)
	}()
	return p
}

// procs returns every process started so far.
func (f *pgFleet) procs() []*pgProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pgProc(nil), f.all...)
}

// waitReady waits for the ready line, the process's exit, or limit.
func (p *pgProc) waitReady(limit time.Duration) error {
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("server %s exited (%v) before it was ready; last lines: %s", p.id, p.waitErr, p.logTail(10))
	case <-time.After(limit):
		return fmt.Errorf("server %s not ready after %s; last lines: %s", p.id, limit, p.logTail(10))
	}
}

func (p *pgProc) isReady() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

func (p *pgProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process and waits until it is gone.
func (p *pgProc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate asks the process to stop (SIGTERM) and waits up to limit; past
// it the process is killed and an error returned.
func (p *pgProc) terminate(limit time.Duration) error {
	if !p.alive() {
		return nil
	}
	p.mu.Lock()
	p.terminated = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("server %s exited with %v after SIGTERM; last lines: %s", p.id, p.waitErr, p.logTail(5))
		}
		return nil
	case <-time.After(limit):
		p.kill()
		return fmt.Errorf("server %s did not exit within %s of SIGTERM; last lines: %s", p.id, limit, p.logTail(5))
	}
}

// exitedOnItsOwn reports whether the process ended without the test
// killing or stopping it.
func (p *pgProc) exitedOnItsOwn() bool {
	if p.alive() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.killed && !p.terminated
}

func (p *pgProc) badLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bad...)
}

func (p *pgProc) logTail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.recent
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// killAll SIGKILLs every process still running (test cleanup).
func (f *pgFleet) killAll() {
	for _, p := range f.procs() {
		if p.alive() {
			p.kill()
		}
	}
}
