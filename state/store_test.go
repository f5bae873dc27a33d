package state

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

type journal struct {
	Step    string `json:"step"`
	Restart int    `json:"restart"`
}

func TestSectionsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save("recovery", journal{Step: "drained", Restart: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save("outbox", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var j journal
	if ok, err := s2.Load("recovery", &j); !ok || err != nil || j.Step != "drained" || j.Restart != 1 {
		t.Fatalf("recovery section after reopen = %+v, %v, %v", j, ok, err)
	}
	var out []string
	if ok, _ := s2.Load("outbox", &out); !ok || len(out) != 2 {
		t.Fatalf("outbox after reopen = %v", out)
	}
	if ok, _ := s2.Load("missing", &out); ok {
		t.Fatal("absent section reported present")
	}
	if err := s2.Delete("outbox"); err != nil {
		t.Fatal(err)
	}
	s3, _ := Open(path)
	if ok, _ := s3.Load("outbox", &out); ok {
		t.Fatal("deleted section came back")
	}
}

func TestCorruptFileIsAnErrorNotAReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(path, []byte(`{"recovery": {"step": "dra`), 0o600)
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Open(corrupt) = %v, want a corrupt-file error", err)
	}
}

func TestConcurrentSavesLeaveAValidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, _ := Open(path)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Save([]string{"a", "b", "c", "d"}[i%4], journal{Restart: i})
		}()
	}
	wg.Wait()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if ok, err := s2.Load(name, &journal{}); !ok || err != nil {
			t.Fatalf("section %s: %v %v", name, ok, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".state-*"))
	if len(left) != 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
}

func TestOpenRefusesAStateDirectoryItCannotWrite(t *testing.T) {
	// /proc refuses new files even to root, unlike a chmod-ed directory.
	if _, err := os.Stat("/proc/self"); err != nil {
		testinfra.Unavailable(t, "PROC", testinfra.RequireProcEnv, err)
	}
	_, err := Open("/proc/vigil-state.json")
	if err == nil || !strings.Contains(err.Error(), "state: directory /proc of /proc/vigil-state.json is not writable") {
		t.Fatalf("Open in /proc = %v, want a not-writable error", err)
	}
}
