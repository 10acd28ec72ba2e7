package scenario

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// report prints one table per scenario, then the scenario's checks, and
// collects the outcomes that differ from what the scenario promises.
type report struct {
	w        io.Writer
	tw       *tabwriter.Writer
	checks   []string
	failures []string
}

func newReport(w io.Writer) *report { return &report{w: w} }

func (r *report) title(s string) {
	r.flush()
	fmt.Fprintf(r.w, "\n%s\n%s\n", s, strings.Repeat("-", len(s)))
	r.tw = tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
}

func (r *report) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(r.tw, "\t")
		}
		fmt.Fprint(r.tw, c)
	}
	fmt.Fprintln(r.tw)
}

// note prints a line after the table.
func (r *report) note(format string, args ...any) {
	r.checks = append(r.checks, "  "+fmt.Sprintf(format, args...))
}

// expect records a failure unless ok; the check is printed after the
// table either way.
func (r *report) expect(ok bool, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if ok {
		r.checks = append(r.checks, "  ok   "+msg)
		return
	}
	r.checks = append(r.checks, "  FAIL "+msg)
	r.failures = append(r.failures, msg)
}

func (r *report) flush() {
	if r.tw != nil {
		r.tw.Flush()
	}
	for _, c := range r.checks {
		fmt.Fprintln(r.w, c)
	}
	r.checks = nil
}
