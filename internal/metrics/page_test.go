package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads a page with Prometheus' own text parser, the one promtool
// and the Prometheus server use.
func parse(t *testing.T, page []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("Prometheus' parser: %v\n%s", err, page)
	}
	return fams
}

func render(p *Page) []byte {
	var b bytes.Buffer
	p.WriteTo(&b)
	return b.Bytes()
}

// TestPage: what Prometheus reads back is what was written, families are
// whole and typed, and promtool's linter finds nothing.
func TestPage(t *testing.T) {
	var p Page
	var h Histogram
	h.Observe(3 * time.Millisecond)
	h.Observe(2 * time.Second)
	h.Observe(time.Hour)
	p.Counter("baton_requests_total", "Requests.", 1234)
	p.Gauge("baton_connections", "Open now.\nSecond line with a \\ backslash.", 7, "listener", "web")
	p.Histogram("baton_http_request_duration_seconds", "Durations.", ptr(h.Series("baton_http_request_duration_seconds", "backend", "a\tb \"c\" \\d\ne")))
	p.Counter("baton_backend_requests_total", "By backend.", 1, "backend", "x")
	p.Gauge("baton_connections", "ignored: the family's help is the first", 9, "listener", "other")
	p.Counter("baton_backend_requests_total", "", 2, "backend", "y")
	page := render(&p)
	fams := parse(t, page)

	if c := fams["baton_requests_total"]; c.GetType() != dto.MetricType_COUNTER || c.Metric[0].GetCounter().GetValue() != 1234 {
		t.Errorf("counter: %v", c)
	}
	if g := fams["baton_connections"]; g.GetType() != dto.MetricType_GAUGE || len(g.Metric) != 2 || g.GetHelp() != "Open now.\nSecond line with a \\ backslash." {
		t.Errorf("gauge family: %v", g)
	}
	if b := fams["baton_backend_requests_total"]; len(b.Metric) != 2 {
		t.Errorf("a family named twice is not whole: %v", b)
	}
	hist := fams["baton_http_request_duration_seconds"]
	if hist.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("histogram: %v", hist)
	}
	m := hist.Metric[0]
	if v := m.Label[0].GetValue(); v != "a\tb \"c\" \\d\ne" {
		t.Errorf("label value read back as %q", v)
	}
	hh := m.GetHistogram()
	if hh.GetSampleCount() != 3 || hh.GetSampleSum() < 3602.003 || hh.GetSampleSum() > 3602.0031 {
		t.Errorf("count %d sum %g", hh.GetSampleCount(), hh.GetSampleSum())
	}
	if len(hh.Bucket) != len(Buckets)+1 || hh.Bucket[3].GetUpperBound() != 0.005 || hh.Bucket[3].GetCumulativeCount() != 1 ||
		hh.Bucket[len(Buckets)-1].GetCumulativeCount() != 2 || hh.Bucket[len(Buckets)].GetCumulativeCount() != 3 {
		t.Errorf("buckets %v", hh.Bucket)
	}
	problems, err := promlint.New(bytes.NewReader(page)).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint (promtool check metrics): %v %v\n%s", err, problems, page)
	}
}

func ptr[T any](v T) *T { return &v }

// FuzzLabelValue: any label value, and any help text, read back by
// Prometheus' parser as written (invalid UTF-8 replaced).
func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "web", "a\tb", `"quoted"`, `back\slash`, "new\nline", "\xff\xfe", `\"\n`, "é ☃"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var p Page
		p.Counter("x_total", s, 1, "v", s)
		fams := parse(t, render(&p))
		want := strings.ToValidUTF8(s, "\uFFFD")
		x := fams["x_total"]
		if got := x.Metric[0].Label[0].GetValue(); got != want {
			t.Errorf("label value %q read back as %q", want, got)
		}
		// The format cannot keep a help text's leading blanks.
		if got := x.GetHelp(); got != strings.TrimLeft(want, " \t") {
			t.Errorf("help %q read back as %q", want, got)
		}
	})
}
