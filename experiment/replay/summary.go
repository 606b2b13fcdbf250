package replay

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/robinhoodcache/robinhood/experiment/scenario"
	"github.com/robinhoodcache/robinhood/experiment/slo"
)

// Summary is summary.json; docs/workloads.md, "tracegen replay", lists its
// fields.
type Summary struct {
	Trace      string   `json:"trace"`
	AppServers []string `json:"app_servers"`
	// Mode is "rate" (Poisson at Rate) or "trace" (the trace's ts_ms).
	Mode     string  `json:"mode"`
	Rate     float64 `json:"rate,omitempty"`
	Seed     uint64  `json:"seed"`
	Loop     bool    `json:"loop"`
	Loops    int     `json:"loops"`
	TimeoutS float64 `json:"timeout_s"`
	// DurationS is the run the series covers: --duration, or the last send
	// when the trace ended earlier or the run was interrupted.
	DurationS float64 `json:"duration_s"`
	// ScheduleS is how long the schedule ran on the wall clock.
	ScheduleS   float64 `json:"schedule_s"`
	TraceEnded  bool    `json:"trace_ended"`
	Interrupted bool    `json:"interrupted"`
	// Aborted holds the reason a malformed trace line stopped the run.
	Aborted string `json:"aborted,omitempty"`

	Sent       int64            `json:"sent"`
	Dropped    int64            `json:"dropped"`  // not sent: the in-flight cap
	Answered   int64            `json:"answered"` // with an HTTP answer
	OK         int64            `json:"ok"`       // with a 2xx one
	Status     map[string]int64 `json:"status"`
	Errors     map[string]int64 `json:"errors"`
	OutOfOrder int64            `json:"out_of_order"`

	Latency            Latency `json:"latency_ms"`
	LatencyAfterWarmup Latency `json:"latency_ms_after_warmup"`

	Lateness Lateness `json:"lateness"`
	InFlight InFlight `json:"in_flight"`

	SLO      SLOSection      `json:"slo"`
	Scenario ScenarioSection `json:"scenario"`
}

// Latency holds nearest-rank percentiles in ms over the requests with a
// latency (answered or timed out).
type Latency struct {
	N     int      `json:"n"`
	P50   *float64 `json:"p50"`
	P90   *float64 `json:"p90"`
	P99   *float64 `json:"p99"`
	P99_9 *float64 `json:"p99_9"`
	Max   *float64 `json:"max"`
}

// Lateness says whether the scheduler kept up: sends more than ThresholdMs
// late, percentiles of every send's lateness (0 for one on time), and
// whether some send was more than BehindThresholdMs late.
type Lateness struct {
	ThresholdMs       float64 `json:"threshold_ms"`
	LateSends         int64   `json:"late_sends"`
	MaxLateMs         float64 `json:"max_late_ms"`
	P50LateMs         float64 `json:"p50_late_ms"`
	P99LateMs         float64 `json:"p99_late_ms"`
	P999LateMs        float64 `json:"p99_9_late_ms"`
	BehindThresholdMs float64 `json:"behind_threshold_ms"`
	FellBehind        bool    `json:"fell_behind"`
}

// InFlight reports the in-flight cap and the peak.
type InFlight struct {
	Cap  int   `json:"cap"`
	Peak int64 `json:"peak"`
}

// SeriesPoint is one SLO observation; percentiles are null without
// requests.
type SeriesPoint struct {
	TS  float64  `json:"t_s"`
	N   int      `json:"n"`
	P50 *float64 `json:"p50_ms"`
	P90 *float64 `json:"p90_ms"`
	P99 *float64 `json:"p99_ms"`
}

// SLOSection is the SLO method of docs/algorithms.md: every step the percentiles over
// the last window; violation_pct is the share of points after the warm-up
// whose P99 exceeds the SLO (P90 and P50 against the same SLO for
// reference).
type SLOSection struct {
	SLOMs          float64       `json:"slo_ms"`
	StepS          float64       `json:"step_s"`
	WindowS        float64       `json:"window_s"`
	WarmupS        float64       `json:"warmup_s"`
	PointsCounted  int           `json:"points_counted"`
	ViolationPct   float64       `json:"violation_pct"`
	ViolationPct90 float64       `json:"violation_pct_p90"`
	ViolationPct50 float64       `json:"violation_pct_p50"`
	Series         []SeriesPoint `json:"series"`
}

// ScenarioSection reports the scenario's changes.
type ScenarioSection struct {
	File    string `json:"file,omitempty"`
	Changes int    `json:"changes"`
	// Applied and Failed count PUTs to replicas.
	Applied int    `json:"applied"`
	Failed  int    `json:"failed"`
	Error   string `json:"error,omitempty"`
}

func ptr(v float64) *float64 { return &v }

// LatencyOf is the percentiles section of a set of latencies (µs).
func LatencyOf(us []uint32) Latency {
	l := Latency{N: len(us)}
	if len(us) == 0 {
		return l
	}
	p := slo.Percentiles(us, 0.50, 0.90, 0.99, 0.999)
	l.P50, l.P90, l.P99, l.P99_9 = ptr(slo.Ms(p[0])), ptr(slo.Ms(p[1])), ptr(slo.Ms(p[2])), ptr(slo.Ms(p[3]))
	l.Max = ptr(slo.Ms(slices.Max(us)))
	return l
}

func (r *run) summary(end, schedule time.Duration, sched *schedule, interrupted bool, changes int, sc scenario.Totals) (*Summary, error) {
	p := r.cfg.SLO
	if p.Warmup < 0 {
		p.Warmup = time.Duration(float64(end) * r.cfg.WarmupFraction)
	}
	s := &Summary{
		Trace:       r.cfg.TracePath,
		Mode:        "trace",
		Rate:        r.cfg.Rate,
		Seed:        r.cfg.Seed,
		Loop:        r.cfg.Loop,
		Loops:       sched.Loops,
		TimeoutS:    r.cfg.Timeout.Seconds(),
		DurationS:   end.Seconds(),
		ScheduleS:   schedule.Seconds(),
		TraceEnded:  sched.Ended,
		Interrupted: interrupted,
		Sent:        r.sent.Load(),
		Dropped:     r.dropped.Load(),
		Status:      r.status,
		Errors:      map[string]int64{"http_4xx": 0, "http_5xx": 0, "timeout": 0, "transport": 0, "dropped": 0},
		OutOfOrder:  sched.OutOfOrder(),
		Lateness: Lateness{
			ThresholdMs:       float64(LateThreshold) / float64(time.Millisecond),
			LateSends:         r.late.Load(),
			MaxLateMs:         float64(r.maxLateNs.Load()) / 1e6,
			BehindThresholdMs: float64(BehindThreshold) / float64(time.Millisecond),
			FellBehind:        time.Duration(r.maxLateNs.Load()) > BehindThreshold,
		},
		InFlight: InFlight{Cap: r.cfg.MaxInFlight, Peak: r.peak.Load()},
		Scenario: ScenarioSection{Changes: changes, Applied: sc.Applied, Failed: sc.Failed},
	}
	if lp := slo.Percentiles(r.lateUs, 0.5, 0.99, 0.999); lp != nil {
		s.Lateness.P50LateMs, s.Lateness.P99LateMs, s.Lateness.P999LateMs = slo.Ms(lp[0]), slo.Ms(lp[1]), slo.Ms(lp[2])
	}
	if r.cfg.Rate > 0 {
		s.Mode = "rate"
	}
	if r.cfg.Scenario != nil {
		s.Scenario.File = r.cfg.Scenario.File
	}
	for _, a := range r.apps {
		s.AppServers = append(s.AppServers, a.id)
	}
	maps.Copy(s.Errors, r.kinds)
	for code, n := range r.status {
		if c, err := strconv.Atoi(code); err == nil { // an HTTP code, not timeout, error or dropped
			s.Answered += n
			if c < 300 {
				s.OK += n
			}
		}
	}
	s.Latency = LatencyOf(r.rec.All(0))
	s.LatencyAfterWarmup = LatencyOf(r.rec.All(p.Warmup))

	sec, err := SLOResults(r.rec, p, end)
	if err != nil {
		return nil, err
	}
	s.SLO = sec
	return s, nil
}

// SLOResults is the SLO section of a run whose requests rec holds (by send
// time), up to end: the method of docs/algorithms.md. The replayer and the
// simulator both report with it.
func SLOResults(rec *slo.Recorder, p slo.Params, end time.Duration) (SLOSection, error) {
	points, err := slo.Series(rec, p, end)
	if err != nil {
		return SLOSection{}, err
	}
	v := slo.Violation(points, p)
	sec := SLOSection{
		SLOMs:          float64(p.SLO) / float64(time.Millisecond),
		StepS:          p.Step.Seconds(),
		WindowS:        p.Window.Seconds(),
		WarmupS:        p.Warmup.Seconds(),
		PointsCounted:  v.Points,
		ViolationPct:   v.P99Pct,
		ViolationPct90: v.P90Pct,
		ViolationPct50: v.P50Pct,
		Series:         make([]SeriesPoint, 0, len(points)),
	}
	for _, pt := range points {
		sp := SeriesPoint{TS: pt.T.Seconds(), N: pt.N}
		if pt.N > 0 {
			sp.P50, sp.P90, sp.P99 = ptr(pt.P50), ptr(pt.P90), ptr(pt.P99)
		}
		sec.Series = append(sec.Series, sp)
	}
	return sec, nil
}
