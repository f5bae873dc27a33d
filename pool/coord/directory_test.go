package coord

import (
	"slices"
	"testing"
)

func nodes(rs []Registered) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Node)
	}
	return out
}

func TestDirectoryKeepsVanishedMembersUntilForgotten(t *testing.T) {
	var d Directory
	reg := func(ns ...string) []Registered {
		var out []Registered
		for _, n := range ns {
			out = append(out, Registered{Node: n, URL: "http://" + n + "/status"})
		}
		return out
	}
	steps := []struct {
		set, forget    []string
		wantRegistered []string
		wantGone       []string
	}{
		{set: []string{"a", "b", "c"}, wantRegistered: []string{"a", "b", "c"}},
		{set: []string{"a", "c"}, wantRegistered: []string{"a", "c"}, wantGone: []string{"b"}},
		{set: []string{"a"}, wantRegistered: []string{"a"}, wantGone: []string{"b", "c"}},
		{set: []string{"a", "b"}, wantRegistered: []string{"a", "b"}, wantGone: []string{"c"}},
		{set: []string{"a", "b"}, forget: []string{"c"}, wantRegistered: []string{"a", "b"}},
	}
	for i, s := range steps {
		d.Set(reg(s.set...))
		for _, n := range s.forget {
			d.Forget(n)
		}
		if got := nodes(d.Registered()); !slices.Equal(got, s.wantRegistered) {
			t.Errorf("step %d: registered %v, want %v", i, got, s.wantRegistered)
		}
		if got := nodes(d.Gone()); !slices.Equal(got, s.wantGone) {
			t.Errorf("step %d: gone %v, want %v", i, got, s.wantGone)
		}
	}
	if g := d.Gone(); len(g) != 0 {
		t.Fatalf("gone %v", g)
	}
	d.Set(reg("x"))
	if g := d.Gone(); len(g) != 2 || g[0].URL != "http://a/status" {
		t.Errorf("gone members keep their /status URL: %v", g)
	}
}
