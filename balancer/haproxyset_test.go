package balancer

import (
	"testing"
)

func TestMergedStateOfAPair(t *testing.T) {
	t.Parallel()
	self := func(status string, drained bool, sessions, weight int) ServerStatus {
		return ServerStatus{Backend: "vllm", Server: "node2", Status: status, Drained: drained, Sessions: sessions, Weight: weight, InitialWeight: 100}
	}
	other := func(drained bool, sessions int) []ServerStatus {
		return []ServerStatus{{Backend: "vllm", Server: "node1", Status: "UP", Drained: drained, Sessions: sessions}}
	}
	cases := []struct {
		name         string
		a, b         State
		drained      bool
		sessions     int
		weight       int
		status       string
		otherDrained bool
	}{
		{"drained on both: drained, sessions summed",
			State{Known: true, Self: self("DRAIN", true, 2, 100), Others: other(false, 1)},
			State{Known: true, Self: self("DRAIN", true, 3, 100), Others: other(false, 4)},
			true, 5, 100, "DRAIN", false},
		{"drained on one only is not drained",
			State{Known: true, Self: self("DRAIN", true, 0, 100), Others: other(false, 0)},
			State{Known: true, Self: self("UP", false, 7, 100), Others: other(false, 0)},
			false, 7, 100, "DRAIN/UP", false},
		{"a peer drained on either holds the pool's lock",
			State{Known: true, Self: self("UP", false, 0, 100), Others: other(true, 0)},
			State{Known: true, Self: self("UP", false, 0, 50), Others: other(false, 0)},
			false, 0, 50, "UP", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mergeStates([]State{tc.a, tc.b})
			if !m.Known || m.Self.Drained != tc.drained || m.Self.Sessions != tc.sessions || m.Self.Weight != tc.weight ||
				m.Self.Status != tc.status || len(m.Others) != 1 || m.Others[0].Drained != tc.otherDrained {
				t.Errorf("merged %+v", m)
			}
		})
	}
}
