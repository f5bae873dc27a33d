package humanize

import (
	"strings"
	"testing"
)

func TestTablePadsColumns(t *testing.T) {
	tb := Table{Header: []string{"arm", "x"}}
	tb.Add("direct", "1.0%")
	tb.Add("v", "100.0%")
	var b strings.Builder
	tb.Print(&b)
	want := "| arm    |      x |\n| ------ | -----: |\n| direct |   1.0% |\n| v      | 100.0% |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
