package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// report prints one table per scenario and collects the outcomes that
// differ from what the scenario promises.
type report struct {
	w        io.Writer
	tw       *tabwriter.Writer
	failures []string
}

func newReport(w io.Writer) *report { return &report{w: w} }

func (r *report) title(s string) {
	r.flush()
	fmt.Fprintf(r.w, "\n%s\n%s\n", s, strings.Repeat("-", len(s)))
	r.tw = tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
}

func (r *report) row(cells ...string) {
	fmt.Fprintln(r.tw, strings.Join(cells, "\t"))
}

// expect records a failure unless ok, and prints the check either way.
func (r *report) expect(ok bool, format string, args ...any) {
	r.flush()
	msg := fmt.Sprintf(format, args...)
	if ok {
		fmt.Fprintf(r.w, "  ok: %s\n", msg)
		return
	}
	fmt.Fprintf(r.w, "  FAIL: %s\n", msg)
	r.failures = append(r.failures, msg)
}

func (r *report) flush() {
	if r.tw != nil {
		r.tw.Flush()
	}
}
