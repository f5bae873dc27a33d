package calls

import (
	"container/list"
	"net/http"
	"time"
)

// Result is a finished 2xx answer kept for retries that arrive after it.
// It is shared: read it, never change it.
type Result struct {
	k      Key
	Status int
	Header http.Header
	Body   []byte
	at     time.Time
	size   int64
}

// resultStore is an LRU of results bounded by age and total bytes.
type resultStore struct {
	ttl      time.Duration
	maxBytes int64
	bytes    int64
	lru      list.List // of *Result, most recent first
	byKey    map[Key]*list.Element
}

func newResultStore(ttl time.Duration, maxBytes int64) *resultStore {
	return &resultStore{ttl: ttl, maxBytes: maxBytes, byKey: map[Key]*list.Element{}}
}

func (s *resultStore) get(k Key, now time.Time) *Result {
	e, ok := s.byKey[k]
	if !ok {
		return nil
	}
	res := e.Value.(*Result)
	if now.Sub(res.at) > s.ttl {
		s.remove(e)
		return nil
	}
	s.lru.MoveToFront(e)
	return res
}

// take is get, and the result leaves the store.
func (s *resultStore) take(k Key, now time.Time) *Result {
	res := s.get(k, now)
	if res != nil {
		s.remove(s.byKey[k])
	}
	return res
}

func (s *resultStore) remove(e *list.Element) {
	res := s.lru.Remove(e).(*Result)
	delete(s.byKey, res.k)
	s.bytes -= res.size
}

func (s *resultStore) put(res *Result, now time.Time) {
	res.size = int64(len(res.Body)) + 256
	for k, v := range res.Header {
		res.size += int64(len(k))
		for _, x := range v {
			res.size += int64(len(x))
		}
	}
	// One answer may take at most a quarter of the store.
	if s.ttl <= 0 || res.size > s.maxBytes/4 {
		return
	}
	if e, ok := s.byKey[res.k]; ok {
		s.remove(e)
	}
	s.byKey[res.k] = s.lru.PushFront(res)
	s.bytes += res.size
	for s.lru.Len() > 0 {
		back := s.lru.Back()
		if s.bytes <= s.maxBytes && now.Sub(back.Value.(*Result).at) <= s.ttl {
			break
		}
		s.remove(back)
	}
}
