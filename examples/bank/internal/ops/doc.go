// Package ops holds the tests of floodgate's operating files against real
// programs: the Grafana dashboard (deploy/grafana/floodgate.json) and the
// Prometheus alert rules (deploy/prometheus/alerts.yaml), evaluated by a
// real Prometheus that scrapes bankapi under load through a Redis outage.
//
// The test needs Debian's prometheus package (/usr/bin/prometheus and
// promtool). It skips without it, unless FLOODGATE_REQUIRE_PROMETHEUS is
// set (scripts/test.sh sets it, after installing the package): then it
// fails.
package ops
