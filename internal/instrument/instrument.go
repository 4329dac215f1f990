// Package instrument is what a process's roles record as they work, for
// Prometheus (package metrics serves it): the latency histograms of tasks,
// steps and agent calls, and counters of retries, recoveries,
// compensations, alerts, leader changes and session locks. The roles call
// one Recorder; every method is safe on a nil Recorder, which records
// nothing.
package instrument

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	dt "github.com/drover-run/drover/drovertype"
)

// ClientRecorder returns the Recorder of a *drover.Client; package drover
// sets it, so that package metrics can serve the Recorder without it
// being part of the Client's API.
var ClientRecorder func(client any) *Recorder

// Caps on the distinct values of a label: values past the cap are folded
// into Other, so workflows loaded from files, remote agents and namespaces
// named by callers cannot grow the series without bound.
const (
	MaxWorkflows  = 100
	MaxSteps      = 200
	MaxAgents     = 100
	MaxNamespaces = 200
	MaxLeases     = 20
	MaxQueues     = 100
	// Other stands for every value of a label past its cap. No name of a
	// workflow, step, agent, namespace or queue holds "/", so it is none
	// of them: a namespace's metrics token never sees the folded series.
	Other = "/other"
)

// Kind is what an Observation saw.
type Kind uint8

// The kinds of Observation.
const (
	// TaskFinished: a task reached a final state (State), Duration after
	// it was submitted.
	TaskFinished Kind = iota + 1
	// StepFinished: a step ended (State "processed" or "failed"),
	// Duration after its first dispatch.
	StepFinished
	// StepRetried: the supervisor put a timed-out step back for another try.
	StepRetried
	// Recovered: the supervisor recovered a step past its deadline;
	// State is the action: retry, wait, compensate or error.
	Recovered
	// Compensated: a step's compensation ended (State "compensated" or
	// "failed").
	Compensated
	// Alert: an operator alert (State is its event type).
	Alert
)

// Observation is one thing a committed transaction of the state machine
// did.
type Observation struct {
	Kind Kind
	// Namespace is the stored namespace of the task ("": default).
	Namespace, Workflow, Step string
	State                     string
	Duration                  time.Duration
}

// Buckets of the latency histograms, in seconds.
var (
	taskBuckets  = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600}
	stepBuckets  = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	agentBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// Recorder holds the metrics a process records. It is a
// prometheus.Collector.
type Recorder struct {
	workflows, steps, agents, namespaces, leases, queues *capped

	taskDuration  *prometheus.HistogramVec
	stepDuration  *prometheus.HistogramVec
	agentDuration *prometheus.HistogramVec
	stepRetries   *prometheus.CounterVec
	recoveries    *prometheus.CounterVec
	compensations *prometheus.CounterVec
	alerts        *prometheus.CounterVec
	leaderChanges *prometheus.CounterVec
	sessionLocks  *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
}

// New returns a Recorder with no series yet.
func New() *Recorder {
	wf := []string{"namespace", "workflow"}
	return &Recorder{
		workflows: newCapped(MaxWorkflows), steps: newCapped(MaxSteps), agents: newCapped(MaxAgents),
		namespaces: newCapped(MaxNamespaces), leases: newCapped(MaxLeases), queues: newCapped(MaxQueues),
		taskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "drover_task_duration_seconds",
			Help: "Time from a task's submission to its final state, for the tasks this process finished, by final state.", Buckets: taskBuckets},
			append(wf, "state")),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "drover_step_duration_seconds",
			Help: "Time from a step's first dispatch to its end (processed, or failed for good), supervisor retries included.", Buckets: stepBuckets},
			append(wf, "step", "outcome")),
		agentDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "drover_agent_call_duration_seconds",
			Help: "Duration of each call of an agent function in this process (each try), by outcome: ok, error (transient), permanent, refused (open circuit breaker).", Buckets: agentBuckets},
			[]string{"agent", "outcome"}),
		stepRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_step_retries_total",
			Help: "Steps the supervisor put back for another try after their deadline passed (below the failure threshold)."},
			append(wf, "step")),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_supervisor_recovery_actions_total",
			Help: "Steps past their deadline this process's supervisor recovered, by action: retry, wait (extended wait), compensate, error."},
			append(wf, "action")),
		compensations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_compensations_total",
			Help: "Compensations of steps that ended, by outcome: compensated, failed."},
			append(wf, "step", "outcome")),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_alerts_by_kind_total",
			Help: "Operator alerts this process raised about tasks, by kind (the alert's event type: step_failed, step_waiting, error)."},
			append(wf, "kind")),
		leaderChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_leader_changes_total",
			Help: "Times this process took (acquired) or stopped holding (lost) a leader lease, by lease."},
			[]string{"lease", "change"}),
		sessionLocks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_session_locks_total",
			Help: "Session-queue lock events through this process, by queue and event: renewed, lost (a renew or settle found the lock taken or expired)."},
			[]string{"namespace", "queue", "event"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drover_http_requests_total",
			Help: "HTTP API requests answered, by method, route (the API's route pattern; \"unmatched\" for no route) and status code."},
			[]string{"method", "route", "status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "drover_http_request_duration_seconds",
			Help: "Time to answer an HTTP API request, by method and route (long polls and event streams last as long as they wait).", Buckets: agentBuckets},
			[]string{"method", "route"}),
	}
}

func (r *Recorder) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.taskDuration, r.stepDuration, r.agentDuration, r.stepRetries, r.recoveries,
		r.compensations, r.alerts, r.leaderChanges, r.sessionLocks, r.httpRequests, r.httpDuration}
}

// Describe implements prometheus.Collector.
func (r *Recorder) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range r.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (r *Recorder) Collect(ch chan<- prometheus.Metric) {
	for _, c := range r.collectors() {
		c.Collect(ch)
	}
}

// namespace is the label of a stored namespace.
func (r *Recorder) namespace(stored string) string {
	if stored == "" {
		return dt.DefaultNamespace
	}
	return r.namespaces.value(stored)
}

// Observe records what a transaction of the state machine did, once it
// committed.
func (r *Recorder) Observe(obs []Observation) {
	if r == nil {
		return
	}
	for _, o := range obs {
		ns, wf := r.namespace(o.Namespace), r.workflows.value(dt.LocalName(o.Workflow))
		switch o.Kind {
		case TaskFinished:
			r.taskDuration.WithLabelValues(ns, wf, o.State).Observe(o.Duration.Seconds())
		case StepFinished:
			r.stepDuration.WithLabelValues(ns, wf, r.steps.value(o.Step), o.State).Observe(o.Duration.Seconds())
		case StepRetried:
			r.stepRetries.WithLabelValues(ns, wf, r.steps.value(o.Step)).Inc()
		case Recovered:
			r.recoveries.WithLabelValues(ns, wf, o.State).Inc()
		case Compensated:
			r.compensations.WithLabelValues(ns, wf, r.steps.value(o.Step), o.State).Inc()
		case Alert:
			r.alerts.WithLabelValues(ns, wf, o.State).Inc()
		}
	}
}

// Outcomes of an agent call.
const (
	CallOK        = "ok"
	CallError     = "error"
	CallPermanent = "permanent"
	CallRefused   = "refused"
)

// AgentCall records one call of an agent function.
func (r *Recorder) AgentCall(agent, outcome string, d time.Duration) {
	if r == nil {
		return
	}
	r.agentDuration.WithLabelValues(r.agents.value(agent), outcome).Observe(d.Seconds())
}

// LeaderChange records that this process took (acquired) or stopped
// holding a leader lease. Instance leases ("instance:<ID>") count as
// "instance".
func (r *Recorder) LeaderChange(lease string, acquired bool) {
	if r == nil {
		return
	}
	if len(lease) > len("instance:") && lease[:len("instance:")] == "instance:" {
		lease = "instance"
	}
	change := "lost"
	if acquired {
		change = "acquired"
	}
	r.leaderChanges.WithLabelValues(r.leases.value(lease), change).Inc()
}

// SessionLock records a session lock renewed (renewed) or found lost
// (lost) in queue (its stored name).
func (r *Recorder) SessionLock(queue string, renewed bool) {
	if r == nil {
		return
	}
	event := "lost"
	if renewed {
		event = "renewed"
	}
	r.sessionLocks.WithLabelValues(r.namespace(dt.NamespaceOf(queue)), r.queues.value(dt.LocalName(queue)), event).Inc()
}

// Unmatched is the route label of HTTP requests that matched no route.
const Unmatched = "unmatched"

// HTTPRequest records one answered HTTP API request: route is the
// pattern of the route that served it (never the path), or Unmatched.
func (r *Recorder) HTTPRequest(method, route string, status int, d time.Duration) {
	if r == nil {
		return
	}
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
	default:
		method = Other
	}
	if status == 0 {
		status = 200 // nothing written: net/http answers 200
	}
	r.httpRequests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	r.httpDuration.WithLabelValues(method, route).Observe(d.Seconds())
}

// capped hands out label values: the first max distinct ones as they
// are, every later one as Other.
type capped struct {
	mu   sync.RWMutex
	max  int
	seen map[string]struct{}
}

func newCapped(n int) *capped { return &capped{max: n, seen: make(map[string]struct{}, n)} }

func (c *capped) value(v string) string {
	c.mu.RLock()
	_, ok := c.seen[v]
	full := len(c.seen) >= c.max
	c.mu.RUnlock()
	if ok {
		return v
	}
	if full {
		return Other
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.max {
		return Other
	}
	c.seen[v] = struct{}{}
	return v
}
