package calls

import (
	"container/list"
	"time"
)

// seenKeys remembers recent call keys, bounded by age and count.
type seenKeys struct {
	ttl   time.Duration
	max   int
	lru   list.List // of *seenEntry, most recent first
	byKey map[Key]*list.Element
}

type seenEntry struct {
	k        Key
	at       time.Time
	executed bool          // an attempt of this call started an execution
	gaveUp   time.Duration // the last attempt's client left after this long, unanswered
}

// mark records k and reports whether it was seen within the TTL and, if so,
// whether it ever got an execution and how long its last attempt's client
// waited before it gave up (0: it did not).
func (s *seenKeys) mark(k Key, now time.Time) (seen, executed bool, gaveUp time.Duration) {
	if e, ok := s.byKey[k]; ok {
		ent := e.Value.(*seenEntry)
		fresh := now.Sub(ent.at) <= s.ttl
		ent.at = now
		s.lru.MoveToFront(e)
		gaveUp, ent.gaveUp = ent.gaveUp, 0
		if !fresh {
			ent.executed, gaveUp = false, 0
		}
		return fresh, ent.executed, gaveUp
	}
	s.insert(k, now)
	return false, false, 0
}

// executed records that call k got an execution (inserting k if it was
// forgotten meanwhile).
func (s *seenKeys) executed(k Key, now time.Time) {
	e, ok := s.byKey[k]
	if !ok {
		e = s.insert(k, now)
	}
	e.Value.(*seenEntry).executed = true
}

func (s *seenKeys) insert(k Key, now time.Time) *list.Element {
	e := s.lru.PushFront(&seenEntry{k: k, at: now})
	s.byKey[k] = e
	for s.lru.Len() > 0 {
		back := s.lru.Back()
		if s.lru.Len() <= s.max && now.Sub(back.Value.(*seenEntry).at) <= s.ttl {
			break
		}
		delete(s.byKey, s.lru.Remove(back).(*seenEntry).k)
	}
	return e
}
