package core

import (
	"math"
	"time"
)

// The throughput knee for streams. Streams judged by a TTFT objective are
// not held to the service time's knee (kneeJudges): a decode-bound engine
// trades each answer's pace for throughput up to its seats. But an engine
// whose throughput stops growing before its seats (a KV cache that
// preempts past about 96 of the paper's calls, decode slowed by the
// context it attends to) only gets slower past that point, and while the
// objective lets first tokens through nothing stopped the cap short of
// the seats (#43). The throughput knee measures what a stream more in
// flight adds: the completed work a second at each level of in flight,
// and where a level well above another completes no more, the cap backs
// off to the lower one and grows past it again only after a hold.
//
// Throughput by Little's law, per answer: an answer that ran beside n
// requests in flight (itself included) for s seconds, of size z (its work
// in decode steps, answerSize), says the engine completes x = n*z/s work
// a second at n in flight. Averaged over an answer's level, not counted in
// completions a second: answers' sizes vary (lognormal, sigma 0.5), and a
// count over a span carries that noise and the lag of a service time
// between a change of the cap and its completions, where each answer's x
// already belongs to the level it ran at.
const (
	// kneeLevel: levels of in flight are powers of this ratio (a level
	// holds answers whose n is within it).
	kneeLevel = 1.25
	// kneeGap: a level is judged against levels at least this many
	// below it (in flight 1.25^2 = 1.56 times smaller): adjacent levels
	// differ by less than a decode-bound engine's noise, whose throughput
	// still grows 5% from 160 to 250 in flight.
	kneeGap = 2
	// kneeAnswers: a level's throughput counts from this many answers
	// (decayed weight) on.
	kneeAnswers = 40
	// kneeMemory: a level's answers weigh by exp(-answers since/kneeMemory)
	// of all answers, so a level not visited for a while fades and the
	// engine's mix of calls is relearned.
	kneeMemory = 400
	// kneeMargin and kneeSure: the higher level completes no more when
	// its throughput is under (1+kneeMargin) times the lower's by
	// kneeSure standard errors of the two levels' means: a gain
	// that small is no gain, and a shortfall within the noise of the
	// answers no evidence. decode-bound gains 5% from 160 to 250 in
	// flight, within a rate's noise over 100 answers counted (10%), and a
	// test without the answers' own spread stopped it at random.
	kneeMargin = 0.02
	kneeSure   = 2.0
	// kneeHoldTurns: after a back-off the cap grows past the level it
	// backed off to only after this many service times (the mean in the
	// levels, kneeHoldMin at least), and is then judged again.
	kneeHoldTurns = 30
	kneeHoldMin   = 30 * time.Second
)

// throughputKnee keeps each level's throughput (see above) and the
// ceiling it sets.
type throughputKnee struct {
	levels map[int]*kneeLevelStats
	// ceiling: the cap stays at or under it until holdUntil (0: none).
	ceiling   float64
	holdUntil time.Time
	// answers counts every answer observed: the levels' clock of decay.
	answers float64
}

// kneeLevelStats: decayed sums of a level's answers' in flight,
// throughput (x and its square) and service time, and their weight.
type kneeLevelStats struct {
	w, n, x, x2, svc float64
	at               float64 // answers (all levels) when last updated
	// since: answers since the level was last judged; it is judged every
	// kneeAnswers/4 of them.
	since int
}

func kneeLevelOf(n float64) int {
	return int(math.Round(math.Log(max(1, n)) / math.Log(kneeLevel)))
}

// throughput of a level: its answers' mean x (work a second).
func (l *kneeLevelStats) throughput() float64 {
	if l.w <= 0 {
		return 0
	}
	return l.x / l.w
}

// relVar is the relative variance of the level's throughput: its
// answers' squared coefficient of variation of x over their weight.
func (l *kneeLevelStats) relVar() float64 {
	if l.w <= 1 || l.x <= 0 {
		return 0
	}
	mean := l.x / l.w
	v := max(0, l.x2/l.w-mean*mean)
	return v / (mean * mean) / l.w
}

// decay brings a level's sums to the answers count now.
func (l *kneeLevelStats) decay(now float64) {
	k := math.Exp(-(now - l.at) / kneeMemory)
	l.w, l.n, l.x, l.x2, l.svc = l.w*k, l.n*k, l.x*k, l.x2*k, l.svc*k
	l.at = now
}

// observe feeds one successful answer: its service time svc, the mean
// number in flight n while it ran (itself included) and its size. It
// reports a new ceiling (> 0) when the answer's level completes no more
// than a level kneeGap or more below it: the cap should back off to the
// in flight of the fewest that complete about as much.
func (k *throughputKnee) observe(svc time.Duration, n, size int, now time.Time) float64 {
	if svc <= 0 || n < 1 {
		return 0
	}
	if k.levels == nil {
		k.levels = map[int]*kneeLevelStats{}
	}
	k.answers++
	b := kneeLevelOf(float64(n))
	l := k.levels[b]
	if l == nil {
		l = &kneeLevelStats{at: k.answers}
		k.levels[b] = l
	}
	l.decay(k.answers)
	s := svc.Seconds()
	l.w++
	l.n += float64(n)
	x := float64(n) * float64(max(1, size)) / s
	l.x += x
	l.x2 += x * x
	l.svc += s
	if l.since++; l.w < kneeAnswers || l.since < kneeAnswers/4 {
		return 0
	}
	l.since = 0
	hi := l.throughput()
	var best *kneeLevelStats
	for lb, lo := range k.levels {
		if lb > b-kneeGap {
			continue
		}
		lo.decay(k.answers)
		if lo.w < kneeAnswers {
			continue
		}
		if best == nil || lo.throughput() > best.throughput() {
			best = lo
		}
	}
	if best == nil {
		return 0
	}
	se := math.Sqrt(l.relVar() + best.relVar())
	if hi >= best.throughput()*(1+kneeMargin-kneeSure*se) {
		return 0
	}
	// Back to the fewest in flight that complete about as much as the
	// best: on an engine whose throughput is flat past a point, any
	// level past it is as good as the best, and the fewest in flight
	// start their first tokens soonest.
	to := best
	for lb, lo := range k.levels {
		if lb <= b-kneeGap && lo.w >= kneeAnswers && lo.n/lo.w < to.n/to.w &&
			lo.throughput() >= best.throughput()*(1-kneeMargin) {
			to = lo
		}
	}
	k.ceiling = to.n / to.w
	hold := max(kneeHoldMin, time.Duration(kneeHoldTurns*to.svc/to.w*float64(time.Second)))
	k.holdUntil = now.Add(hold)
	// The levels above the ceiling were judged: forget them, so the next
	// probe past it is judged by its own answers.
	for lb := range k.levels {
		if lb > kneeLevelOf(k.ceiling) {
			delete(k.levels, lb)
		}
	}
	return k.ceiling
}

// bound is the ceiling in force at now (0: none).
func (k *throughputKnee) bound(now time.Time) float64 {
	if k.ceiling > 0 && now.Before(k.holdUntil) {
		return k.ceiling
	}
	k.ceiling = 0
	return 0
}
