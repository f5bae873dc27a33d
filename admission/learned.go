package admission

import (
	"time"

	"github.com/vigil-dev/vigil/admission/core"
)

// What the limiter learned of its engine and clients, kept across vigil's
// own restart (issue 41): the automatic cap and the engine's pace, the
// routes' client timeouts and patience (core.Learned). After a restart
// without it the first burst was served as if vigil had never seen the
// engine: the cap probed up from its start while the burst filled the
// queue.

const (
	// learnedSection is the state file's section (package state).
	learnedSection = "admission_learned"
	// learnedEvery is how often what was learned is written while the
	// limiter runs (and once more at Close): a crash loses at most this
	// much of it, and the file is not rewritten at every change of the cap.
	learnedEvery = 30 * time.Second
	// learnedRefresh: an unchanged section is rewritten this often, so
	// its age says how long ago vigil last ran, well within
	// core.LearnedMaxAge.
	learnedRefresh = 5 * time.Minute
)

// LearnedStore keeps what the limiter learned: package state's Store (a
// section of vigil's state file, written atomically).
type LearnedStore interface {
	Load(name string, v any) (bool, error)
	Save(name string, v any) error
}

// WithLearnedStore keeps what the limiter learns in store, and starts
// from what it holds for the same engine when younger than
// core.LearnedMaxAge.
func WithLearnedStore(store LearnedStore) Option {
	return func(l *Limiter) { l.keep.store = store }
}

// learnedFile is the section: what was learned, and of which engine.
type learnedFile struct {
	// Engine is the upstream it was learned of: after a config change
	// that points vigil at another engine it says nothing.
	Engine string `json:"engine"`
	core.Learned
}

// keeper writes what was learned, every learnedEvery and at Close.
type keeper struct {
	store  LearnedStore
	done   chan struct{}
	last   core.Learned
	warned bool // a failed write was logged (once: an unwritable state file says so at start)
}

// restoreLearned starts the core from the store's section, when it is of
// this engine and young enough (the core judges the age). A section that
// cannot be read is logged and ignored: it is a head start, not state
// vigil must not lose.
func (l *Limiter) restoreLearned() {
	var f learnedFile
	ok, err := l.keep.store.Load(learnedSection, &f)
	switch {
	case err != nil:
		l.log.WithError(err).Warn("admission: what the limiter learned before cannot be read; it learns again")
	case !ok:
	case f.Engine != l.upstream.String():
		l.log.WithField("learned_engine", f.Engine).Info("admission: what the limiter learned was of another engine; it learns again")
	case !l.core.Restore(f.Learned):
		l.log.WithField("learned_at", f.At).Info("admission: what the limiter learned is too old to trust; it learns again")
	}
}

// keepLearned writes what was learned every learnedEvery on the
// limiter's clock, and once more when the limiter closes.
func (l *Limiter) keepLearned() {
	defer close(l.keep.done)
	tick := make(chan struct{}, 1)
	for l.sleepOn(learnedEvery, tick) {
		l.saveLearned()
	}
	l.saveLearned()
}

func (l *Limiter) saveLearned() {
	k := l.core.Learned()
	if k.Empty() || learnedSame(k, l.keep.last) {
		return
	}
	if err := l.keep.store.Save(learnedSection, learnedFile{Engine: l.upstream.String(), Learned: k}); err != nil {
		if !l.keep.warned {
			l.keep.warned = true
			l.log.WithError(err).Warn("admission: cannot keep what the limiter learned; after vigil's restart it learns again")
		}
		return
	}
	l.keep.last = k
}

// learnedSame: nothing new to write but the time, and the file's time is
// recent enough (learnedRefresh): a quiet limiter rewrites the file only
// so often, and its section never ages past trust while vigil runs.
func learnedSame(a, b core.Learned) bool {
	if a.At.Sub(b.At) >= learnedRefresh {
		return false
	}
	a.At, b.At = time.Time{}, time.Time{}
	if len(a.Routes) != len(b.Routes) {
		return false
	}
	for r, x := range a.Routes {
		y, ok := b.Routes[r]
		if !ok || x.Patient != y.Patient || len(x.GiveUps) != len(y.GiveUps) {
			return false
		}
		for i := range x.GiveUps {
			if x.GiveUps[i] != y.GiveUps[i] {
				return false
			}
		}
	}
	a.Routes, b.Routes = nil, nil
	return a.Cap == b.Cap && a.Seats == b.Seats && a.EngineTTFT == b.EngineTTFT &&
		a.EngineService == b.EngineService && a.PrefillTurn == b.PrefillTurn
}
