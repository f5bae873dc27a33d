package core

import "time"

// slidingSum adds values over the last span in a fixed ring of buckets, so
// its memory stays the same however many events arrive (a 10x overload must
// not grow a list of timestamps). A value leaves the sum once its bucket
// falls out of the window; the precision is span/len(buckets).
type slidingSum struct {
	width   time.Duration
	buckets []float64
	head    int64 // bucket number (time / width) of the newest bucket
	total   float64
}

func newSlidingSum(span time.Duration, n int) *slidingSum {
	if n < 1 {
		n = 1
	}
	w := span / time.Duration(n)
	if w <= 0 {
		w = time.Millisecond
	}
	return &slidingSum{width: w, buckets: make([]float64, n)}
}

func (s *slidingSum) bucketOf(t time.Time) int64 { return t.UnixNano() / int64(s.width) }

// advance drops the buckets that left the window by now.
func (s *slidingSum) advance(now time.Time) {
	cur := s.bucketOf(now)
	if cur <= s.head {
		return
	}
	n := int64(len(s.buckets))
	if cur-s.head >= n {
		clear(s.buckets)
		s.total = 0
	} else {
		for b := s.head + 1; b <= cur; b++ {
			i := b % n
			s.total -= s.buckets[i]
			s.buckets[i] = 0
		}
	}
	s.head = cur
}

func (s *slidingSum) add(now time.Time, v float64) {
	s.advance(now)
	s.buckets[s.head%int64(len(s.buckets))] += v
	s.total += v
}

// sum is the window's total, never below zero (corrections can subtract
// more than a bucket still holds).
func (s *slidingSum) sum(now time.Time) float64 {
	s.advance(now)
	return max(0, s.total)
}

// empty reports whether nothing remains in the window.
func (s *slidingSum) empty(now time.Time) bool {
	s.advance(now)
	for _, b := range s.buckets {
		if b != 0 {
			return false
		}
	}
	return true
}

// untilFreed returns how long until at least amount has left the window
// (oldest buckets first), or the whole span if it never will on its own.
func (s *slidingSum) untilFreed(now time.Time, amount float64) time.Duration {
	s.advance(now)
	n := int64(len(s.buckets))
	freed := 0.0
	for b := s.head - n + 1; b <= s.head; b++ {
		freed += s.buckets[((b%n)+n)%n]
		if freed >= amount {
			// Bucket b leaves the window when the newest bucket is b+n.
			return time.Unix(0, (b+n)*int64(s.width)).Sub(now)
		}
	}
	return time.Duration(n) * s.width
}
