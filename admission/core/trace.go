package core

import (
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
)

// Step is one control step of the automatic cap (a window closed and the
// law applied): the cap before and after, the evidence that judged it and
// what moved or held it. It is logged at trace level (see traceSteps), so
// a run that reads badly can be read step by step: which evidence stopped
// the cap, and what the objective was then.
type Step struct {
	At       time.Time
	Was, Cap float64
	// Gate is the first-token limit after the step (0: none).
	Gate int
	// Objective, P90 and Mean: the TTFT objective in force and the first
	// tokens that judged the cap (TTFTs of them), in seconds.
	Objective, P90, Mean float64
	TTFTs                int
	// Turn and LeanTurn: the engine's prefill time at one stream, and its
	// least prefill time a prefilled token (seconds); Prefilled the mean
	// prompt tokens prefilled lately (see firstTokenGate).
	Turn, LeanTurn, Prefilled float64
	// Waiting, Running and Backlog: the engine's queue over the window
	// and the seats a prefill backlog may use.
	Waiting, Running, Backlog float64
	// Service and Knee: the service-time estimate and its knee (seconds).
	Service, Knee float64
	// Why: what cut the cap, or what grew or held it.
	Why string
}

// Tracer is a Limit that reports its control steps.
type Tracer interface {
	TraceSteps(func(Step))
}

// TraceSteps calls f with every control step from now on.
func (a *autoLimit) TraceSteps(f func(Step)) { a.trace = f }

// step reports one control step to the tracer.
func (a *autoLimit) step(ev window, old float64, why string, now time.Time) {
	if a.trace == nil {
		return
	}
	a.trace(Step{At: now, Was: old, Cap: a.limit, Gate: a.gate.bound(),
		Objective: ev.target, P90: ev.p90, Mean: a.ttfts.mean(), TTFTs: len(a.ttfts),
		Turn: a.gate.turn, LeanTurn: a.gate.leanTurn, Prefilled: a.gate.prefilled,
		Waiting: ev.w, Running: ev.r, Backlog: ev.backlog,
		Service: ev.svc, Knee: ev.knee, Why: why})
}

// why names the congestion that cut the cap.
func (ev window) why() string {
	var s string
	add := func(on bool, what string) {
		if on {
			if s != "" {
				s += "+"
			}
			s += what
		}
	}
	add(ev.queued, "queued")
	add(ev.slow, "slow")
	add(ev.pastKnee, "past knee")
	add(ev.late, "late")
	add(ev.pastStreams, "past the streams' throughput knee")
	add(ev.drops > 0, fmt.Sprintf("%d drops", ev.drops))
	return "cut: " + s
}

// traceSteps logs every control step of the Limit at trace level, when
// the logger logs that level.
func traceSteps(lim Limit, log *logrus.Entry) {
	t, ok := lim.(Tracer)
	if !ok || !log.Logger.IsLevelEnabled(logrus.TraceLevel) {
		return
	}
	t.TraceSteps(func(s Step) {
		log.WithFields(logrus.Fields{"at": s.At.Format("15:04:05.000"),
			"cap": fmt.Sprintf("%.1f->%.1f", s.Was, s.Cap), "gate": s.Gate,
			"objective": round3(s.Objective), "p90": round3(s.P90), "mean": round3(s.Mean), "ttfts": s.TTFTs,
			"turn": round3(s.Turn), "lean_turn_ms_per_ktok": round3(s.LeanTurn * 1e6), "prefilled": int(s.Prefilled),
			"waiting": round3(s.Waiting), "running": round3(s.Running), "backlog": round3(s.Backlog),
			"service": round3(s.Service), "knee": round3(s.Knee), "why": s.Why,
		}).Trace("admission: control step")
	})
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
