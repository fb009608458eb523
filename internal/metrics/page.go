package metrics

import (
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Page is a metrics page in the Prometheus text exposition format, version
// 0.0.4: families of samples, each written whole, after its HELP and TYPE
// lines, in the order the families were first named. Label values and
// help texts are escaped as the format says (a backslash, a double quote
// and a line feed in label values; a backslash and a line feed in help),
// and made valid UTF-8.
//
// The page is checked against Prometheus' own parser and linter (the
// library promtool uses) in the tests.
type Page struct {
	order []string
	fams  map[string]*family
}

type family struct {
	typ, help string
	buf       []byte
}

func (p *Page) family(name, typ, help string) *family {
	if p.fams == nil {
		p.fams = make(map[string]*family)
	}
	f := p.fams[name]
	if f == nil {
		f = &family{typ: typ, help: help}
		p.fams[name] = f
		p.order = append(p.order, name)
	}
	return f
}

// Counter adds a counter sample; labels are name, value pairs.
func (p *Page) Counter(name, help string, v float64, labels ...string) {
	f := p.family(name, "counter", help)
	f.buf = appendSample(f.buf, name, labels, "", "", v)
}

// Gauge adds a gauge sample.
func (p *Page) Gauge(name, help string, v float64, labels ...string) {
	f := p.family(name, "gauge", help)
	f.buf = appendSample(f.buf, name, labels, "", "", v)
}

// Histogram adds s, a histogram series with Buckets' bounds, as its
// cumulative buckets, sum and count. A series of another shape is left
// out.
func (p *Page) Histogram(name, help string, s *Series) {
	if len(s.Counts) != len(Buckets)+1 {
		return
	}
	f := p.family(name, "histogram", help)
	var cum uint64
	for i, c := range s.Counts {
		cum += c
		le := "+Inf"
		if i < len(Buckets) {
			le = formatFloat(Buckets[i])
		}
		f.buf = appendSample(f.buf, name+"_bucket", s.Labels, "le", le, float64(cum))
	}
	f.buf = appendSample(f.buf, name+"_sum", s.Labels, "", "", s.Sum)
	f.buf = appendSample(f.buf, name+"_count", s.Labels, "", "", float64(cum))
}

// WriteTo writes the page.
func (p *Page) WriteTo(w io.Writer) (int64, error) {
	var b []byte
	for _, name := range p.order {
		f := p.fams[name]
		b = append(b, "# HELP "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = appendEscaped(b, f.help, false)
		b = append(b, "\n# TYPE "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, f.typ...)
		b = append(b, '\n')
		b = append(b, f.buf...)
	}
	n, err := w.Write(b)
	return int64(n), err
}

// appendSample appends one sample line: name, labels (and the extra one
// when extraName is set), value.
func appendSample(b []byte, name string, labels []string, extraName, extraValue string, v float64) []byte {
	b = append(b, name...)
	if len(labels) > 1 || extraName != "" {
		b = append(b, '{')
		first := true
		add := func(k, v string) {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, k...)
			b = append(b, `="`...)
			b = appendEscaped(b, v, true)
			b = append(b, '"')
		}
		for i := 0; i+1 < len(labels); i += 2 {
			add(labels[i], labels[i+1])
		}
		if extraName != "" {
			add(extraName, extraValue)
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = append(b, formatFloat(v)...)
	return append(b, '\n')
}

// appendEscaped appends s escaped for a label value (quote) or a help
// text.
func appendEscaped(b []byte, s string, quote bool) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// formatFloat formats v as Prometheus does: the shortest representation,
// and +Inf, -Inf, NaN.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
