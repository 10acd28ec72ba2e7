package upstats

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// Settings are envoyproxy/ratelimit's statistics settings, read from its
// variables with its defaults (its src/settings/settings.go), except
// USE_STATSD: see Parse.
type Settings struct {
	Statsd        bool              // USE_STATSD: statsd to Host:Port
	DogStatsd     bool              // USE_DOG_STATSD: DogStatsD (tags apart) to Host:Port instead
	Mogrifiers    []mogrifier       // USE_DOG_STATSD_MOGRIFIERS and their DOG_STATSD_MOGRIFIER_* variables
	Host          string            // STATSD_HOST: localhost
	Port          int               // STATSD_PORT: 8125
	Protocol      string            // STATSD_PROTOCOL (gostats's, which upstream's sink reads): tcp, or udp
	ExtraTags     map[string]string // EXTRA_TAGS: k:v,k:v, on every statistic
	FlushInterval time.Duration     // STATS_FLUSH_INTERVAL: 10s
	Disabled      bool              // DISABLE_STATS: none of the above, whatever they say

	Prometheus bool // USE_PROMETHEUS: the statistics mapped to Prometheus series, beside floodgate's
	// Mapping is the mapping's YAML: PROMETHEUS_MAPPER_YAML's file, or
	// upstream's default mapping.
	Mapping string
}

// Enabled reports whether anything is to be sent or mapped.
func (s Settings) Enabled() bool {
	return !s.Disabled && (s.Statsd || s.DogStatsd || s.Prometheus)
}

// Parse reads the settings. bad is told of each variable that cannot be
// honoured, named first. USE_PROMETHEUS is read as a boolean without
// complaint: the caller reports its value.
//
// USE_STATSD unset is false, where upstream's default is true: floodgate
// serves its metrics on /metrics always, and does not dial a statsd that
// nobody named. Envoy Gateway sets it either way.
func Parse(getenv func(string) string, bad func(name, format string, a ...any)) Settings {
	s := Settings{Host: cmp.Or(getenv("STATSD_HOST"), "localhost"), Port: 8125, Protocol: "tcp", FlushInterval: 10 * time.Second}
	boolean := func(name string) bool {
		v := getenv(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, "%q is not true or false", v)
		}
		return b
	}
	s.Statsd = boolean("USE_STATSD")
	s.DogStatsd = boolean("USE_DOG_STATSD")
	s.Disabled = boolean("DISABLE_STATS")
	s.Prometheus, _ = strconv.ParseBool(getenv("USE_PROMETHEUS"))
	if v := getenv("STATSD_PORT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 65535 {
			bad("STATSD_PORT", "%q is not a port", v)
		}
		s.Port = n
	}
	switch v := getenv("STATSD_PROTOCOL"); strings.ToLower(v) {
	case "":
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		s.Protocol = strings.ToLower(v)
	default:
		bad("STATSD_PROTOCOL", "%q is not tcp or udp", v)
	}
	// gostats reads these itself when its sink is made, and panics on a
	// value it cannot parse: checked here first.
	if v := getenv("GOSTATS_FLUSH_INTERVAL_SECONDS"); v != "" {
		if _, err := strconv.Atoi(v); err != nil {
			bad("GOSTATS_FLUSH_INTERVAL_SECONDS", "%q is not a whole number (the flush interval is STATS_FLUSH_INTERVAL)", v)
		}
	}
	boolean("GOSTATS_LOGGING_SINK_DISABLED")
	if v := getenv("STATS_FLUSH_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("STATS_FLUSH_INTERVAL", "%q is not a positive duration such as 10s", v)
		} else {
			s.FlushInterval = d
		}
	}
	if v := getenv("EXTRA_TAGS"); v != "" {
		// envconfig's map form, as upstream reads it: k:v pairs, comma
		// separated.
		s.ExtraTags = map[string]string{}
		for _, pair := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(pair, ":")
			if !ok {
				bad("EXTRA_TAGS", "%q is not KEY:VALUE,KEY:VALUE", v)
				break
			}
			s.ExtraTags[k] = val
		}
	}
	if v := getenv("USE_DOG_STATSD_MOGRIFIERS"); v != "" {
		for _, name := range strings.Split(v, ",") {
			m, err := newMogrifier(name, getenv)
			if err != nil {
				bad("USE_DOG_STATSD_MOGRIFIERS", "%v", err)
				continue
			}
			s.Mogrifiers = append(s.Mogrifiers, m)
		}
	}

	s.Mapping = defaultMapping
	readable := true
	if p := getenv("PROMETHEUS_MAPPER_YAML"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			bad("PROMETHEUS_MAPPER_YAML", "%v", err)
			readable = false
		}
		s.Mapping = string(b)
	}
	if boolean("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS") && getenv("PROMETHEUS_MAPPER_YAML") == "" {
		// As upstream: the default mapping without its scale to seconds
		// (a file's mapping says its own).
		s.Mapping = strings.Replace(s.Mapping, "    scale: 0.001\n", "", 1)
	}
	if s.Prometheus && !s.Disabled && readable {
		// Upstream ignores a mapping it cannot read; refused here, so that
		// no series goes missing unseen.
		if err := (&mapper.MetricMapper{}).InitFromYAMLString(s.Mapping); err != nil {
			bad("PROMETHEUS_MAPPER_YAML", "%s: %v", cmp.Or(getenv("PROMETHEUS_MAPPER_YAML"), "the default mapping"), err)
		}
	}
	return s
}

// mogrifier is one of upstream's DogStatsD mogrifiers: a name matching
// Pattern is renamed to Name, with Tags, each of which may use the
// match's $1, $2...
type mogrifier struct {
	pattern *regexp.Regexp
	name    string
	tags    [][2]string // key, value pattern; sorted by key (upstream's order is a map's)
}

var placeholder = regexp.MustCompile(`\$\d+`)

// newMogrifier reads DOG_STATSD_MOGRIFIER_<name>_PATTERN, _NAME and _TAGS
// (k:v,k:v), as upstream's godogstats does.
func newMogrifier(name string, getenv func(string) string) (mogrifier, error) {
	prefix := "DOG_STATSD_MOGRIFIER_" + name + "_"
	pat := getenv(prefix + "PATTERN")
	if pat == "" {
		return mogrifier{}, fmt.Errorf("no %sPATTERN for mogrifier %s", prefix, name)
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return mogrifier{}, fmt.Errorf("%sPATTERN: %w", prefix, err)
	}
	m := mogrifier{pattern: re, name: getenv(prefix + "NAME")}
	if m.name == "" {
		return mogrifier{}, fmt.Errorf("no %sNAME for mogrifier %s", prefix, name)
	}
	if v := getenv(prefix + "TAGS"); v != "" {
		for _, pair := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(pair, ":")
			if !ok || k == "" || val == "" {
				return mogrifier{}, fmt.Errorf("%sTAGS %q is not KEY:VALUE,KEY:VALUE", prefix, v)
			}
			m.tags = append(m.tags, [2]string{k, val})
		}
		slices.SortFunc(m.tags, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	}
	return m, nil
}

// expand replaces $N in s by the match's group N.
func expand(s string, groups []string) string {
	return placeholder.ReplaceAllStringFunc(s, func(p string) string {
		i, err := strconv.Atoi(p[1:])
		if err != nil || i >= len(groups) {
			return p
		}
		return groups[i]
	})
}

// mogrify applies the first mogrifier that matches name.
func mogrify(ms []mogrifier, name string) (string, []string) {
	for _, m := range ms {
		g := m.pattern.FindStringSubmatch(name)
		if len(g) == 0 {
			continue
		}
		tags := make([]string, 0, len(m.tags))
		for _, t := range m.tags {
			tags = append(tags, t[0]+":"+expand(t[1], g))
		}
		return expand(m.name, g), tags
	}
	return name, nil
}
