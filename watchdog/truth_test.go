package watchdog

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// attempt is one try at a repeated operation: its error, and when.
type attempt struct {
	err error
	at  time.Duration
}

// #40: "cannot persist state" was logged at error level every cycle (22
// lines in 50 s) while the state directory stayed read-only: one error,
// then a reminder with a count, then one line when it works again.
func TestARepeatedFaultIsLoggedOnceThenReminded(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	boom := errors.New("open /var/lib/vigil/.state-123.tmp: read-only file system")
	// A fault every 15 s for 12 min, then a save that works.
	var lasting []attempt
	wantLasting := make([]faultNews, 49)
	for i := range 48 {
		lasting = append(lasting, attempt{boom, time.Duration(i) * 15 * time.Second})
	}
	lasting = append(lasting, attempt{nil, 12 * time.Minute})
	wantLasting[0], wantLasting[40], wantLasting[48] = faultBegan, faultGoesOn, faultEnded
	cases := []struct {
		name  string
		tries []attempt
		want  []faultNews
	}{
		{"nothing wrong, nothing said", []attempt{{nil, 0}, {nil, 15 * time.Second}}, []faultNews{faultQuiet, faultQuiet}},
		{"a fault every 15 s for 12 min: one error, one reminder at 10 min, then its end", lasting, wantLasting},
		{"a fault that comes back after it ended is news again",
			[]attempt{{boom, 0}, {nil, 15 * time.Second}, {boom, 30 * time.Second}},
			[]faultNews{faultBegan, faultEnded, faultBegan}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f fault
			for i, a := range tc.tries {
				if got := f.note(a.err, t0.Add(a.at)); got != tc.want[i] {
					t.Fatalf("try %d (%s): got %d, want %d", i, a.at, got, tc.want[i])
				}
			}
		})
	}
}

type busyRecoverer struct{ busy bool }

func (b busyRecoverer) Recover(context.Context, Incident, Verdict) {}
func (b busyRecoverer) Busy() bool                                 { return b.busy }
func (b busyRecoverer) LastRestart() time.Time                     { return time.Time{} }

// #40: "the engine serves but something is odd" was logged and paged
// while vigil's own restart had just killed the frozen process.
func TestNoOddityIsToldWhileVigilRecoversTheEngine(t *testing.T) {
	for _, busy := range []bool{false, true} {
		var buf bytes.Buffer
		l := logrus.New()
		l.SetOutput(&buf)
		w := &Watchdog{opts: Options{Recoverer: busyRecoverer{busy}}, log: logrus.NewEntry(l)}
		v := Verdict{State: StateHealthy, Evidence: Evidence{Odd: []string{"looks down (/health refused, /v1/models refused) but a probe completed: not down"}}}
		c := w.conditions(v)
		_, told := c["engine_odd"]
		logged := strings.Contains(buf.String(), "something is odd")
		if told != !busy || logged != !busy {
			t.Errorf("recovery busy %v: condition told %v, logged %v; want both %v", busy, told, logged, !busy)
		}
	}
}
