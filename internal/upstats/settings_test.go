package upstats

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, env map[string]string) (Settings, []string) {
	t.Helper()
	var errs []string
	s := Parse(func(k string) string { return env[k] }, func(name, format string, a ...any) {
		errs = append(errs, name+": "+fmt.Sprintf(format, a...))
	})
	return s, errs
}

// TestParseDefaults: unset, every setting takes envoyproxy/ratelimit's
// default (STATSD_HOST localhost, STATSD_PORT 8125, gostats's TCP,
// STATS_FLUSH_INTERVAL 10s, the default mapping), except USE_STATSD,
// which is off.
func TestParseDefaults(t *testing.T) {
	s, errs := parse(t, nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if s.Statsd || s.DogStatsd || s.Disabled || s.Prometheus || s.Host != "localhost" || s.Port != 8125 || s.Protocol != "tcp" ||
		s.FlushInterval != 10*time.Second || s.ExtraTags != nil || s.Mogrifiers != nil || s.Mapping != defaultMapping || s.Enabled() {
		t.Errorf("%+v", s)
	}
}

// TestParseSettings: each variable as upstream reads it.
func TestParseSettings(t *testing.T) {
	s, errs := parse(t, map[string]string{
		"USE_STATSD": "true", "STATSD_HOST": "statsd.example", "STATSD_PORT": "9125", "STATSD_PROTOCOL": "UDP",
		"STATS_FLUSH_INTERVAL": "250ms", "EXTRA_TAGS": "env:prod,url:http://x", "USE_PROMETHEUS": "true",
		"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true",
	})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if !s.Statsd || s.Host != "statsd.example" || s.Port != 9125 || s.Protocol != "udp" || s.FlushInterval != 250*time.Millisecond ||
		!maps.Equal(s.ExtraTags, map[string]string{"env": "prod", "url": "http://x"}) || !s.Prometheus || !s.Enabled() {
		t.Errorf("%+v", s)
	}
	// Upstream's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS drops the
	// default mapping's scale to seconds, and nothing else.
	if strings.Contains(s.Mapping, "scale: 0.001") || len(s.Mapping) != len(defaultMapping)-len("    scale: 0.001\n") {
		t.Errorf("the mapping in milliseconds:\n%s", s.Mapping)
	}

	// DISABLE_STATS wins over every sink.
	s, errs = parse(t, map[string]string{"USE_STATSD": "true", "USE_DOG_STATSD": "true", "USE_PROMETHEUS": "true", "DISABLE_STATS": "true"})
	if len(errs) != 0 || s.Enabled() {
		t.Errorf("with DISABLE_STATS: %+v %v", s, errs)
	}
}

// TestSanitize: upstream's SanitizeStatName.
func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"d.k_v":                     "d.k_v",
		"d.remote_address_10.0.0.1": "d.remote_address_10_0_0_1",
		"d.k_a:b|c":                 "d.k_a_b_c",
		"d.k_1.2.3":                 "d.k_1.2.3",
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMogrify: the first matching mogrifier renames, with its tags in
// key order.
func TestMogrify(t *testing.T) {
	env := map[string]string{
		"DOG_STATSD_MOGRIFIER_A_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.total_hits$`, "DOG_STATSD_MOGRIFIER_A_NAME": "hits",
		"DOG_STATSD_MOGRIFIER_A_TAGS": "z:$1,a:$2,n:$9", "DOG_STATSD_MOGRIFIER_B_PATTERN": `.`, "DOG_STATSD_MOGRIFIER_B_NAME": "other",
		"USE_DOG_STATSD_MOGRIFIERS": "A,B",
	}
	s, errs := parse(t, env)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	name, tags := mogrify(s.Mogrifiers, "ratelimit.service.rate_limit.d.k_v.total_hits")
	if name != "hits" || strings.Join(tags, ",") != "a:k_v,n:$9,z:d" {
		t.Errorf("%s %v", name, tags)
	}
	if name, tags := mogrify(s.Mogrifiers, "ratelimit.service.config_load_success"); name != "other" || len(tags) != 0 {
		t.Errorf("%s %v", name, tags)
	}
	if name, tags := mogrify(nil, "x.y"); name != "x.y" || tags != nil {
		t.Errorf("%s %v", name, tags)
	}
}
