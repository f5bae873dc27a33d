package haproxystat

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Parse reads the CSV of "show stat" and keeps backend's server
// rows (not its FRONTEND/BACKEND aggregates): server name → column
// (status, scur, stot, ...) → value.
func Parse(out, backend string) (map[string]map[string]string, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# ")))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("show stat header: %w", err)
	}
	res := map[string]map[string]string{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("show stat: %w", err)
		}
		if len(rec) < 2 || rec[0] != backend || rec[1] == "BACKEND" || rec[1] == "FRONTEND" {
			continue
		}
		row := map[string]string{}
		for i, name := range header {
			if i < len(rec) {
				row[name] = rec[i]
			}
		}
		res[rec[1]] = row
	}
	return res, nil
}
