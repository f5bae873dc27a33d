package humanize

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Table is a Markdown table that also reads well in a terminal: columns
// padded to their widest cell, the first left-aligned, the others right.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row; cells are formatted with fmt.Sprint.
func (t *Table) Add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = fmt.Sprint(c)
	}
	t.Rows = append(t.Rows, row)
}

// Print writes the table to w.
func (t *Table) Print(w io.Writer) {
	width := make([]int, len(t.Header))
	for i, h := range t.Header {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i := range width {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(" " + c + pad + " |")
			} else {
				b.WriteString(" " + pad + c + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(t.Header)
	sep := make([]string, len(width))
	for i, n := range width {
		if i == 0 {
			sep[i] = strings.Repeat("-", n)
		} else {
			sep[i] = strings.Repeat("-", n-1) + ":"
		}
	}
	fmt.Fprintln(w, "|"+func() string {
		var b strings.Builder
		for _, s := range sep {
			b.WriteString(" " + s + " |")
		}
		return b.String()
	}())
	for _, r := range t.Rows {
		line(r)
	}
}

// Pct formats a fraction as a percentage with one decimal.
func Pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
