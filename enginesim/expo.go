package enginesim

import (
	"bufio"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// The /metrics text is written here rather than by promhttp so that it reads
// like vLLM's Python exposition, byte for byte where it matters to a parser
// under test: families in vLLM's order, labels sorted with "le" among them,
// histograms as buckets then _count then _sum, a "<name>_created" gauge
// family after every counter, and Python's float formatting ("0.0",
// "2.424921e+06").

// writeText writes every family of m in registration order.
func (m *metrics) writeText(out io.Writer, created float64) error {
	fams, err := m.reg.Gather()
	if err != nil {
		return err
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	w := bufio.NewWriter(out)
	for _, name := range m.order {
		f := byName[name]
		if f == nil {
			continue
		}
		typ := strings.ToLower(f.GetType().String())
		header(w, name, f.GetHelp(), typ)
		// Gather sorts series by label text; put ranks in numeric order
		// (engine="2" before engine="10"), as vLLM creates them.
		slices.SortStableFunc(f.Metric, func(a, b *dto.Metric) int { return engineRank(a) - engineRank(b) })
		for _, s := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				line(w, name, s.GetLabel(), "", "", s.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				line(w, name, s.GetLabel(), "", "", s.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := s.GetHistogram()
				for _, b := range h.GetBucket() {
					line(w, name+"_bucket", s.GetLabel(), "le", pyFloat(b.GetUpperBound()), float64(b.GetCumulativeCount()))
				}
				line(w, name+"_bucket", s.GetLabel(), "le", "+Inf", float64(h.GetSampleCount()))
				line(w, name+"_count", s.GetLabel(), "", "", float64(h.GetSampleCount()))
				line(w, name+"_sum", s.GetLabel(), "", "", h.GetSampleSum())
			}
		}
		if f.GetType() == dto.MetricType_COUNTER {
			cname := strings.TrimSuffix(name, "_total") + "_created"
			header(w, cname, f.GetHelp(), "gauge")
			for _, s := range f.GetMetric() {
				line(w, cname, s.GetLabel(), "", "", created)
			}
		}
	}
	return w.Flush()
}

// engineRank is a series' engine label as a number (0 without one).
func engineRank(m *dto.Metric) int {
	for _, l := range m.GetLabel() {
		if l.GetName() == "engine" {
			n, _ := strconv.Atoi(l.GetValue())
			return n
		}
	}
	return 0
}

func header(w *bufio.Writer, name, help, typ string) {
	w.WriteString("# HELP " + name + " " + strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help) + "\n")
	w.WriteString("# TYPE " + name + " " + typ + "\n")
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func line(w *bufio.Writer, name string, labels []*dto.LabelPair, extraName, extraValue string, v float64) {
	lineText(w, name, labels, extraName, extraValue, pyFloat(v))
}

// lineText writes one sample whose value is already formatted.
func lineText(w *bufio.Writer, name string, labels []*dto.LabelPair, extraName, extraValue, value string) {
	type kv struct{ k, v string }
	ls := make([]kv, 0, len(labels)+1)
	for _, l := range labels {
		ls = append(ls, kv{l.GetName(), l.GetValue()})
	}
	if extraName != "" {
		ls = append(ls, kv{extraName, extraValue})
	}
	slices.SortFunc(ls, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	w.WriteString(name)
	if len(ls) > 0 {
		w.WriteByte('{')
		for i, l := range ls {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(l.k + `="` + labelEscaper.Replace(l.v) + `"`)
		}
		w.WriteByte('}')
	}
	w.WriteString(" " + value + "\n")
}

// pyFloat formats like prometheus_client's floatToGoString: Python's repr
// of a float, switched to an exponent once there are more than six integer
// digits.
func pyFloat(d float64) string {
	switch {
	case math.IsInf(d, 1):
		return "+Inf"
	case math.IsInf(d, -1):
		return "-Inf"
	case math.IsNaN(d):
		return "NaN"
	}
	s := pyRepr(d)
	dot := strings.IndexByte(s, '.')
	if d > 0 && dot > 6 {
		mantissa := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return mantissa + "e+0" + strconv.Itoa(dot-1)
	}
	return s
}

// pyRepr is Python's repr(float): the shortest round-tripping digits, in
// fixed notation with at least one decimal when 1e-4 <= |d| < 1e16.
func pyRepr(d float64) string {
	if d == 0 {
		if math.Signbit(d) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(d, 'e', -1, 64) // e.g. -1.2345e+06
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		return mant + "e" + sign + es
	}
	s := strconv.FormatFloat(d, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
