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
// in decode steps, answerSize), says the engine completes n*z/s work a
// second at n in flight. Averaged as n / (s/z) over an answer's level, not
// counted in completions a second: answers' sizes vary (lognormal, sigma
// 0.5), and a count over a span carries that noise and the lag of a
// service time between a change of the cap and its completions, where the
// pace s/z of each answer already belongs to the level it ran at.
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
	// kneeMargin: the higher level completes no more when its throughput
	// is under (1+kneeMargin) times the lower's: a gain that small is
	// within the noise of kneeAnswers paces.
	kneeMargin = 0.02
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

// kneeLevelStats: decayed sums of a level's answers' in flight, pace and
// service time, and their weight.
type kneeLevelStats struct {
	w, n, pace, svc float64
	at              float64 // answers (all levels) when last updated
	// since: answers since the level was last judged; it is judged every
	// kneeAnswers/4 of them.
	since int
}

func kneeLevelOf(n float64) int {
	return int(math.Round(math.Log(max(1, n)) / math.Log(kneeLevel)))
}

// throughput of a level: its mean in flight over its mean pace (work a
// second).
func (l *kneeLevelStats) throughput() float64 {
	if l.pace <= 0 {
		return 0
	}
	return l.n / l.pace
}

// decay brings a level's sums to the answers count now.
func (l *kneeLevelStats) decay(now float64) {
	k := math.Exp(-(now - l.at) / kneeMemory)
	l.w, l.n, l.pace, l.svc = l.w*k, l.n*k, l.pace*k, l.svc*k
	l.at = now
}

// observe feeds one successful answer: its service time svc, the mean
// number in flight n while it ran (itself included) and its size. It
// reports a new ceiling (> 0) when the answer's level completes no more
// than one kneeGap levels or more below it: the cap should back off to
// that lower level's in flight.
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
	l.pace += s / float64(max(1, size))
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
	if best == nil || hi >= best.throughput()*(1+kneeMargin) {
		return 0
	}
	k.ceiling = best.n / best.w
	hold := max(kneeHoldMin, time.Duration(kneeHoldTurns*best.svc/best.w*float64(time.Second)))
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
