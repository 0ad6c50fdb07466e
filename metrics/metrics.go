// Package metrics exposes the round to Prometheus: its phase, each node's
// current step and window, window durations, approvals waiting for a
// signature and their age, failures by step, and notifications sent or
// failed. Gauges are read from the round's journal state at scrape time (the
// source of truth, so a restarted server reports the same); counters count
// what this process did. It must not change anything: no journal writes, no
// host or cluster calls.
package metrics

import (
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-patch/mcp-patch/round"
)

// Namespace prefixes every metric.
const Namespace = "mcp_patch"

// Source returns the state of the open round, or nil when none is open.
type Source func() (*round.State, error)

// Pending is one approval request waiting for a person's signature.
type Pending struct {
	Tool, Node, Round string
	Since, Expires    time.Time
}

// Metrics is the registry and what feeds it.
type Metrics struct {
	reg    *prometheus.Registry
	source Source
	now    func() time.Time
	// Expected is the window length a node is expected to need (for the
	// over-expected alert); nil means none is known.
	expected func(*round.State) time.Duration

	mu      sync.Mutex
	pending map[string]Pending

	notifications *prometheus.CounterVec
	// readErrors counts scrapes that could not read the round. It is
	// reported by the round collector itself, so a scrape that fails counts
	// in that same scrape (collectors are gathered concurrently).
	readErrors atomic.Uint64
}

// Options for New.
type Options struct {
	// Expected gives the expected window length for the open round.
	Expected func(*round.State) time.Duration
	Now      func() time.Time
	// Process adds the Go runtime and process collectors.
	Process bool
}

// New returns metrics reading the round from source.
func New(source Source, o Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), source: source, now: o.Now, expected: o.Expected, pending: map[string]Pending{}}
	if m.now == nil {
		m.now = time.Now
	}
	m.notifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "notifications_total",
		Help: "Notification deliveries by hook, event kind and outcome (sent, failed).",
	}, []string{"hook", "kind", "outcome"})
	m.reg.MustRegister(m.notifications, roundCollector{m})
	if o.Process {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// Notified counts one delivery outcome.
func (m *Metrics) Notified(hook, kind string, sent bool) {
	if m == nil {
		return
	}
	outcome := "failed"
	if sent {
		outcome = "sent"
	}
	m.notifications.WithLabelValues(hook, kind, outcome).Inc()
}

// ApprovalPending notes a request waiting for a signature; it returns true
// the first time this tool/node pair is noted (until it is resolved or
// expires), so a caller can notify once.
func (m *Metrics) ApprovalPending(p Pending) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	k := p.Tool + "\x00" + p.Node
	if old, ok := m.pending[k]; ok && old.Round == p.Round {
		old.Expires = p.Expires
		m.pending[k] = old
		return false
	}
	m.pending[k] = p
	return true
}

// ApprovalResolved drops a pending request (signed and acted on, or the
// step went ahead another way).
func (m *Metrics) ApprovalResolved(tool, node string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, tool+"\x00"+node)
}

// PendingApprovals lists the requests still waiting, oldest first.
func (m *Metrics) PendingApprovals() []Pending {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	out := make([]Pending, 0, len(m.pending))
	for _, p := range m.pending {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Since.Before(out[b].Since) })
	return out
}

func (m *Metrics) expire() {
	now := m.now()
	for k, p := range m.pending {
		if !p.Expires.IsZero() && !now.Before(p.Expires) {
			delete(m.pending, k)
		}
	}
}

var (
	descPhase = prometheus.NewDesc(Namespace+"_round_phase", "1 for the phase the open round is in (not_planned, windows, closing, stopped, aborted, closed).",
		[]string{"round", "phase"}, nil)
	descStep = prometheus.NewDesc(Namespace+"_node_step", "1 for each node's current step and its state (pending, in_flight, done, failed).",
		[]string{"round", "node", "step", "state"}, nil)
	descWindow = prometheus.NewDesc(Namespace+"_node_window", "1 for each node's window state (pending, open, closed).",
		[]string{"round", "node", "state"}, nil)
	descOpen = prometheus.NewDesc(Namespace+"_window_open_seconds", "How long the open window has been open.",
		[]string{"round", "node"}, nil)
	descExpected = prometheus.NewDesc(Namespace+"_window_expected_seconds", "The window length a node is expected to need (median of this round's windows, or the intent's estimate).",
		[]string{"round"}, nil)
	descDurations = prometheus.NewDesc(Namespace+"_window_duration_seconds", "Closed windows of the open round, drain start to green gate.",
		[]string{"round"}, nil)
	descFailures = prometheus.NewDesc(Namespace+"_step_failures_total", "Failed attempts of each step in the open round.",
		[]string{"round", "step"}, nil)
	descStopped = prometheus.NewDesc(Namespace+"_round_stopped", "1 while the round is stopped for a person's decision.",
		[]string{"round", "node", "step"}, nil)
	descReadErrors = prometheus.NewDesc(Namespace+"_round_read_errors_total", "Scrapes that could not read the round's state.",
		nil, nil)
	descPending = prometheus.NewDesc(Namespace+"_approvals_pending", "Approval requests waiting for a person's signature.",
		nil, nil)
	descPendingAge = prometheus.NewDesc(Namespace+"_approval_pending_age_seconds", "How long each approval request has waited for a signature.",
		[]string{"round", "tool", "node"}, nil)
	descStepDurations = prometheus.NewDesc(Namespace+"_step_duration_seconds", "Finished attempts of each window step in the open round, start to end.",
		[]string{"round", "step"}, nil)
	descGateChecks = prometheus.NewDesc(Namespace+"_gate_checks_total", "Recorded gate checks of the open round by result (green, red, abandoned).",
		[]string{"round", "result"}, nil)
	descRollbacks = prometheus.NewDesc(Namespace+"_rollbacks_total", "rollback_node runs of the open round by state (in_flight, done, failed).",
		[]string{"round", "state"}, nil)
	phases          = []round.Phase{round.PhaseNotPlanned, round.PhaseWindows, round.PhaseClosing, round.PhaseStopped, round.PhaseAborted, round.PhaseClosed}
	durationBuckets = []float64{600, 1200, 1800, 2700, 3600, 5400, 7200, 10800, 14400, 21600, 28800}
	stepBuckets     = []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	// gateResults names a gate attempt's outcome on the dashboard.
	gateResults = map[round.Outcome]string{round.OutcomeDone: "green", round.OutcomeFailed: "red", round.OutcomeAbandoned: "abandoned"}
)

// Family is one metric family the server exports: its name as Prometheus
// stores it (a histogram adds _bucket, _sum and _count), type and labels.
type Family struct {
	Name   string
	Type   string
	Labels []string
}

// Exported lists every family the server's /metrics can carry (the
// process and Go runtime collectors aside): the dashboard and the alert
// rules may read these and nothing else. TestExportedIsGathered holds the
// list to what a scrape returns.
func Exported() []Family {
	return []Family{
		{Namespace + "_round_phase", "gauge", []string{"round", "phase"}},
		{Namespace + "_node_step", "gauge", []string{"round", "node", "step", "state"}},
		{Namespace + "_node_window", "gauge", []string{"round", "node", "state"}},
		{Namespace + "_window_open_seconds", "gauge", []string{"round", "node"}},
		{Namespace + "_window_expected_seconds", "gauge", []string{"round"}},
		{Namespace + "_window_duration_seconds", "histogram", []string{"round"}},
		{Namespace + "_step_duration_seconds", "histogram", []string{"round", "step"}},
		{Namespace + "_step_failures_total", "counter", []string{"round", "step"}},
		{Namespace + "_gate_checks_total", "counter", []string{"round", "result"}},
		{Namespace + "_rollbacks_total", "counter", []string{"round", "state"}},
		{Namespace + "_round_stopped", "gauge", []string{"round", "node", "step"}},
		{Namespace + "_round_read_errors_total", "counter", nil},
		{Namespace + "_approvals_pending", "gauge", nil},
		{Namespace + "_approval_pending_age_seconds", "gauge", []string{"round", "tool", "node"}},
		{Namespace + "_notifications_total", "counter", []string{"hook", "kind", "outcome"}},
	}
}

type roundCollector struct{ m *Metrics }

func (c roundCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPhase, descStep, descWindow, descOpen, descExpected, descDurations,
		descFailures, descStopped, descPending, descPendingAge, descReadErrors, descStepDurations, descGateChecks, descRollbacks} {
		ch <- d
	}
}

func (c roundCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	now := m.now()
	pend := m.PendingApprovals()
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(len(pend)))
	for _, p := range pend {
		ch <- prometheus.MustNewConstMetric(descPendingAge, prometheus.GaugeValue, now.Sub(p.Since).Seconds(), p.Round, p.Tool, p.Node)
	}
	st, err := m.source()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descReadErrors, prometheus.CounterValue, float64(m.readErrors.Add(1)))
		ch <- prometheus.NewInvalidMetric(descPhase, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descReadErrors, prometheus.CounterValue, float64(m.readErrors.Load()))
	if st == nil {
		return
	}
	for _, mt := range stateMetrics(st, now, m.expectedFor(st)) {
		ch <- mt
	}
}

func (m *Metrics) expectedFor(st *round.State) time.Duration {
	if m.expected == nil {
		return 0
	}
	return m.expected(st)
}

// stateMetrics turns one round state into metrics (pure, tested).
func stateMetrics(st *round.State, now time.Time, expected time.Duration) []prometheus.Metric {
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	id := st.RoundID
	status := st.Status(now)
	for _, p := range phases {
		v := 0.0
		if status.Phase == p {
			v = 1
		}
		gauge(descPhase, v, id, string(p))
	}
	if st.Stop != nil {
		gauge(descStopped, 1, id, st.Stop.Node, string(st.Stop.Step))
	}
	var closed []float64
	for _, n := range st.Nodes {
		gauge(descWindow, 1, id, n.Node, string(n.Window))
		step, state := currentStep(n)
		gauge(descStep, 1, id, n.Node, string(step), string(state))
		switch n.Window {
		case round.WindowOpen:
			gauge(descOpen, now.Sub(n.Opened).Seconds(), id, n.Node)
		case round.WindowClosed:
			closed = append(closed, n.ClosedAt.Sub(n.Opened).Seconds())
		}
	}
	if expected > 0 {
		gauge(descExpected, expected.Seconds(), id)
	}
	buckets := map[float64]uint64{}
	var sum float64
	for _, b := range durationBuckets {
		buckets[b] = 0
		for _, d := range closed {
			if d <= b {
				buckets[b]++
			}
		}
	}
	for _, d := range closed {
		sum += d
	}
	out = append(out, prometheus.MustNewConstHistogram(descDurations, uint64(len(closed)), sum, buckets, id))
	out = append(out, stepDurations(st)...)
	gates := map[string]int{}
	for _, n := range st.Nodes {
		if r := n.Steps[round.StepGate]; r != nil {
			for _, a := range r.Attempts {
				if res, ok := gateResults[a.Outcome]; ok {
					gates[res]++
				}
			}
		}
	}
	for _, res := range sortedKeys(gates) {
		out = append(out, prometheus.MustNewConstMetric(descGateChecks, prometheus.CounterValue, float64(gates[res]), id, res))
	}
	rollbacks := map[string]int{}
	for _, r := range st.Rollbacks {
		rollbacks[string(r.State)]++
	}
	for _, state := range sortedKeys(rollbacks) {
		out = append(out, prometheus.MustNewConstMetric(descRollbacks, prometheus.CounterValue, float64(rollbacks[state]), id, state))
	}
	failures := map[round.Step]int{}
	for _, f := range st.Failures {
		failures[f.Step]++
	}
	steps := make([]string, 0, len(failures))
	for s := range failures {
		steps = append(steps, string(s))
	}
	sort.Strings(steps)
	for _, s := range steps {
		out = append(out, prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(failures[round.Step(s)]), id, s))
	}
	return out
}

// stepDurations is one histogram per window step over the finished
// attempts (done or failed) of every node, so time per step stays a few
// series however large the fleet.
func stepDurations(st *round.State) []prometheus.Metric {
	var out []prometheus.Metric
	for _, step := range round.WindowSteps {
		var ds []float64
		for _, n := range st.Nodes {
			r := n.Steps[step]
			if r == nil {
				continue
			}
			for _, a := range r.Attempts {
				if a.Outcome == round.OutcomeDone || a.Outcome == round.OutcomeFailed {
					ds = append(ds, a.Ended.Sub(a.Started).Seconds())
				}
			}
		}
		buckets := make(map[float64]uint64, len(stepBuckets))
		var sum float64
		for _, d := range ds {
			sum += d
		}
		for _, b := range stepBuckets {
			for _, d := range ds {
				if d <= b {
					buckets[b]++
				}
			}
		}
		out = append(out, prometheus.MustNewConstHistogram(descStepDurations, uint64(len(ds)), sum, buckets, st.RoundID, string(step)))
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// currentStep is the step a node is at: the last node step (in round
// order) that started, or the first when none did.
func currentStep(n *round.NodeState) (round.Step, round.StepState) {
	step, state := round.NodeSteps[0], round.Pending
	var latest uint64
	for _, s := range round.NodeSteps {
		r := n.Steps[s]
		if r == nil || len(r.Attempts) == 0 {
			continue
		}
		if a := r.Attempts[len(r.Attempts)-1]; a.StartSeq >= latest {
			latest, step, state = a.StartSeq, s, r.State
		}
	}
	return step, state
}
