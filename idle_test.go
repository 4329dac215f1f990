package drover_test

import (
	"context"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/notifier"
)

// While notifications arrive (PostgreSQL), the roles of an idle process
// poll only as a slow fallback: a delayed task still starts when due (the
// scheduler sleeps until then, here with a poll interval of an hour), and
// a step that hangs is recovered soon after its deadline, whether this
// process started it (the submit woke the idle supervisor) or another
// process did in its submit's transaction (an eager start, which notifies
// no one: the supervisor looks every LeaseTTL/3 while idle).
func TestIdleRolesWakeOnTime(t *testing.T) {
	t.Parallel()
	d := pgStore(t)
	hung := make(chan string, 16)
	workflows := []drover.Workflow{
		{Name: "remind", Steps: []drover.Step{{Name: "send", Agent: "mailer", Timeout: time.Minute}}},
		{Name: "stuck", Steps: []drover.Step{{Name: "call", Agent: "hangs", Timeout: 300 * time.Millisecond}}},
	}
	hangs := drover.Agent{Name: "hangs", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		if r.Attempt == 1 {
			hung <- r.TaskID
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return []byte(`"ok"`), nil
	}}
	// The leader: its supervisor, after a quiet spell, looks every
	// LeaseTTL/3 = 2s (the fallback poll is an hour).
	leader := startClient(t, drover.Config{Store: d, InstanceID: "leader", Workflows: workflows,
		PollInterval: time.Hour, SupervisorInterval: 100 * time.Millisecond, LeaseTTL: 6 * time.Second,
		Agents: []drover.Agent{okAgent("mailer"), hangs}})
	waitFor(t, "notifications", notifier.For(d).Live)
	ctx := context.Background()

	submitted := time.Now()
	if _, err := leader.Submit(ctx, "remind", nil, &drover.SubmitOptions{ID: "later", Delay: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	task := waitTask(t, leader, "later")
	if task.ProcessState != drover.Processed {
		t.Fatalf("delayed task: %s", task.ProcessState)
	}
	if took := task.UpdatedAt.Sub(submitted); took < 1500*time.Millisecond || took > 5*time.Second {
		t.Errorf("the delayed task (due 1.5s after its submit) finished %s after it", took)
	}

	// Quiet for longer than the supervisor's quiet interval.
	time.Sleep(3 * time.Second)
	recovered := func(c *drover.Client, id string) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := c.Submit(ctx, "stuck", nil, &drover.SubmitOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		<-hung
		task := waitTask(t, c, id)
		if task.ProcessState != drover.Processed || task.FailureCount != 1 {
			t.Fatalf("%s: %s with FailureCount %d, want Processed after one recovery", id, task.ProcessState, task.FailureCount)
		}
		return time.Since(start)
	}
	// Submitted here: the submit wakes the supervisor, which looks within
	// its interval once the task is held.
	if took := recovered(leader, "stuck-here"); took > 3*time.Second {
		t.Errorf("a step hung 300ms into an idle process was recovered %s after its submit", took)
	}

	// Submitted and started by another process, which runs no supervisor.
	other := startClient(t, drover.Config{Store: d, InstanceID: "other", Workflows: workflows,
		PollInterval: time.Hour, Roles: drover.Roles{Scheduler: true, Agent: true},
		Agents: []drover.Agent{okAgent("mailer"), hangs}})
	time.Sleep(3 * time.Second)
	if took := recovered(other, "stuck-there"); took > 6*time.Second {
		t.Errorf("a step hung 300ms into another process was recovered %s after its submit (want within LeaseTTL/3 and an interval of its deadline)", took)
	}
}
