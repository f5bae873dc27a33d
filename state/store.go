package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Store is the persisted state file. It is safe for concurrent use.
type Store struct {
	path string

	mu       sync.Mutex
	sections map[string]json.RawMessage
}

// ErrNotWritable marks an Open whose store was read but cannot be written.
var ErrNotWritable = errors.New("state: not writable")

// Open reads the state file at path, or starts empty if it does not exist.
// The directory is created if needed, and must be writable: every write
// replaces the file through a temporary file beside it, and a store that
// cannot write is found now rather than at the first recovery step. When
// it cannot be written, Open still returns the store, read as far as it
// could be, with an error that wraps ErrNotWritable: every Save on it
// fails, so nothing that must be journaled (a restart) can run, while what
// needs no journal (the proxy) may. A corrupt file is an error with no
// store: vigil must not forget a drain in progress because a file was
// damaged.
func Open(path string) (*Store, error) {
	s := &Store{path: path, sections: map[string]json.RawMessage{}}
	dir := filepath.Dir(path)
	var unwritable error
	if err := os.MkdirAll(dir, 0o750); err != nil {
		unwritable = fmt.Errorf("state: create directory for %s: %w (%w)", path, err, ErrNotWritable)
	} else if err := probeWritable(dir); err != nil {
		unwritable = fmt.Errorf("state: directory %s of %s is not writable: %w (%w)", dir, path, err, ErrNotWritable)
	}
	if err := s.read(); err != nil {
		return nil, err
	}
	return s, unwritable
}

// read loads the file, if there is one.
func (s *Store) read() error {
	path := s.path
	data, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return fmt.Errorf("state: read %s: %w", path, err)
	case len(data) == 0:
		return nil
	}
	if err := json.Unmarshal(data, &s.sections); err != nil {
		return fmt.Errorf("state: %s is corrupt (move it aside to start fresh): %w", path, err)
	}
	return nil
}

// probeWritable creates and removes a temporary file in dir, as every
// write does.
func probeWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".state-*.tmp")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Memory returns a Store that is never written to disk, for tests, demos
// and diagnose.
func Memory() *Store { return &Store{sections: map[string]json.RawMessage{}} }

// Path is the file this store writes ("" for a memory store).
func (s *Store) Path() string { return s.path }

// Load decodes section name into v. It reports false if the section is
// absent.
func (s *Store) Load(name string, v any) (bool, error) {
	s.mu.Lock()
	raw, ok := s.sections[name]
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("state: section %q in %s: %w", name, s.path, err)
	}
	return true, nil
}

// Save replaces section name with v and writes the whole file atomically.
func (s *Store) Save(name string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state: encode section %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sections[name] = raw
	return s.writeLocked()
}

// Delete removes section name and writes the file.
func (s *Store) Delete(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sections, name)
	return s.writeLocked()
}

func (s *Store) writeLocked() error {
	if s.path == "" {
		return nil
	}
	data, err := json.MarshalIndent(s.sections, "", "  ")
	if err != nil {
		return fmt.Errorf("state: encode: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".state-*.tmp")
	if err != nil {
		return fmt.Errorf("state: write %s: %w", s.path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("state: write %s: %w", s.path, err)
	}
	// fsync before rename: after a power cut the file is either the old
	// state or the new one, never a torn mix.
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("state: sync %s: %w", s.path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state: close %s: %w", s.path, err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("state: replace %s: %w", s.path, err)
	}
	// fsync the directory too: the rename lives in it, and without this a
	// power cut can bring back the old state after vigil acted on the new.
	dir, err := os.Open(filepath.Dir(s.path))
	if err != nil {
		return fmt.Errorf("state: sync directory of %s: %w", s.path, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("state: sync directory of %s: %w", s.path, err)
	}
	return nil
}
