package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/vigil-dev/vigil/"

// The layout table in docs/design.md section 1 is the house, top floor
// first. No arrow runs up it: a package imports nothing on a floor above
// its own, and an import into another top-level folder (a room) lands on
// that room's top floor or below, so that no room holds both the top of
// the house and a helper the floors between reach for. Every package has
// a row. Test files are left out: tests may reach anywhere.
func TestNoArrowRunsUpTheHouse(t *testing.T) {
	floors := layoutFloors(t, "../../docs/design.md")
	floorOf := func(pkg string) (int, bool) {
		best, floor := "", 0
		for folder, f := range floors {
			if (pkg == folder || strings.HasPrefix(pkg, folder+"/")) && len(folder) > len(best) {
				best, floor = folder, f
			}
		}
		return floor, best != ""
	}
	room := func(pkg string) string { return strings.Split(pkg, "/")[0] }
	roomTop := map[string]int{}
	for folder, f := range floors {
		if top, ok := roomTop[room(folder)]; !ok || f < top {
			roomTop[room(folder)] = f
		}
	}

	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		f, ok := floorOf(pkg)
		if !ok {
			t.Errorf("%s has no row in the layout table (docs/design.md section 1): give it one, with its floor", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			g, _ := floorOf(dep)
			switch {
			case room(dep) == room(pkg) && g < f:
				t.Errorf("%s (floor %d) imports %s (floor %d): an arrow runs up", pkg, f, dep, g)
			case room(dep) != room(pkg) && roomTop[room(dep)] < f:
				t.Errorf("%s (floor %d) imports %s, in %s/ whose top is floor %d: an arrow runs up into that room",
					pkg, f, dep, room(dep), roomTop[room(dep)])
			}
		}
	}
}

// layoutFloors reads the rows of section 1's table: floor, `folder`, what
// it does. A row whose floor is "–" holds no Go package.
func layoutFloors(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	floors := map[string]int{}
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## 1. Layout")
			continue
		}
		cells := strings.Split(line, "|")
		if !in || len(cells) < 4 {
			continue
		}
		floor, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			continue // the header, its rule, and the rows without Go
		}
		folder := strings.Trim(strings.TrimSpace(cells[2]), "`")
		floors[folder] = floor
	}
	if len(floors) == 0 {
		t.Fatalf("%s: no layout table with floors in section 1", path)
	}
	return floors
}
