package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// The shipped files, from this package's directory.
var (
	alertsFile    = filepath.Join("..", "..", "..", "..", "deploy", "prometheus", "alerts.yaml")
	dashboardFile = filepath.Join("..", "..", "..", "..", "deploy", "grafana", "floodgate.json")
)

// The durations of the test. Prometheus scrapes and evaluates every
// second; the dashboard's $__rate_interval is four scrapes; the alert
// file is the shipped one with only its durations shortened: every "for"
// to 2s, the 5m rate windows to 4s, the 1h baseline of the denial spike
// and the 15m window of the reload failures to 60s.
const (
	rateInterval = "4s"
	alertFor     = "2s"
)

var (
	shortWindows = strings.NewReplacer("[5m]", "["+rateInterval+"]", "[1h]", "[60s]", "[15m]", "[60s]")
	forLine      = regexp.MustCompile(`(?m)^(\s+for:) \S+$`)
)

// notExported names the metrics that nothing this test scrapes exports
// yet, and who will. A query on them must return no series here; once
// bankapi (or a process the test starts) exports one, the test fails until
// its entry goes, so that the query is then checked like the others.
var notExported = map[string]string{
	"floodgate_xds_": "the floodgate service's xDS client (CONFIG_TYPE=GRPC_XDS_SOTW), not bankapi's: alerts_test.yaml tests its alerts",
}

// The alerts the shipped file must hold, and the two that must fire
// during a Redis outage.
var (
	wantAlerts = []string{"FloodgateBreakerOpen", "FloodgateConfigReloadFailed", "FloodgateDegradedDecisions", "FloodgateDenialRatioSpike", "FloodgateStoreLatencyNearBudget",
		"FloodgateXDSConfigRejected", "FloodgateXDSDisconnected", "FloodgateXDSNoConfiguration"}
	outageAlerts = []string{"FloodgateBreakerOpen", "FloodgateDegradedDecisions"}
	// pixLimits is bankapi's LIMITS_FILE: PIX 100 a minute per account,
	// with a placeholder to change it without changing its meaning.
	pixLimits = "domain: bank\ndescriptors:\n  - key: pix\n    rate_limit: {unit: minute, requests_per_unit: 100}\n%s"
)

// TestDashboardAndAlerts runs bankapi on a real Redis under load, scraped
// by a real Prometheus that loads the shipped alert rules. The load has a
// steady part, while bankapi's LIMITS_FILE changes once and then breaks
// (the reload alert must fire), then a burst of denials on one account,
// then Redis stops
// (SIGSTOP) until the breaker and degraded-decision alerts fire, then
// Redis continues. Every query of the dashboard and every alert expression
// must then return series over the run; the two outage alerts must have
// fired during the outage and not before, the denial spike's during the
// burst.
func TestDashboardAndAlerts(t *testing.T) {
	promBin, promtool := findPrometheus(t)
	if out, err := exec.Command(promtool, "check", "rules", alertsFile).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", len(wantAlerts))) {
		t.Fatalf("promtool check rules %s: %v\n%s", alertsFile, err, out)
	}
	panels := dashboardQueries(t)
	dir := t.TempDir()

	redis := redistest.Start(t)
	limitsFile := filepath.Join(dir, "limits.yaml")
	writeFile(t, limitsFile, fmt.Sprintf(pixLimits, ""))
	env := map[string]string{
		"LIMITS_FILE":  limitsFile,
		"REDIS_URL":    redis.URL(),
		"TOKEN_SECRET": "ops-test-secret-0123456789abcdefghijklmnop",
		// Room for the load from one address, and a statement limit that
		// the burst's account exceeds 4 times over while the steady
		// accounts stay under it.
		"LIMIT_GLOBAL_IP":   "100000/1m",
		"LIMIT_LOGIN_IP":    "1000/10m",
		"LIMIT_STATEMENT":   "10/1s",
		"FAILURE_STATEMENT": "local",
		// A budget that a loaded test machine keeps, so that nothing is
		// degraded before the outage.
		"DECISION_TIMEOUT": "250ms",
		"LOG_LEVEL":        "error",
	}
	cfg, err := bank.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	app, err := bank.NewApp(ctx, cfg, slog.New(slog.DiscardHandler), bank.AppOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	api := httptest.NewServer(app.Handler())
	defer api.Close()
	metrics := httptest.NewServer(app.MetricsHandler())
	defer metrics.Close()

	prom := startPrometheus(t, promBin, dir, metrics.Listener.Addr().String())
	rules := prom.alertRules(t)
	if names := slices.Sorted(maps.Keys(rules)); !slices.Equal(names, wantAlerts) {
		t.Fatalf("Prometheus loaded the alerts %q, want %q", names, wantAlerts)
	}

	docs := bank.DemoDocuments(7)
	tokens := make([]string, len(docs))
	for i, d := range docs {
		tokens[i] = login(t, api.URL, string(d))
	}
	start := time.Now()
	steady := &load{api: api.URL}
	// Steady: four accounts read their statement 5 times a second (under
	// 10/1s), two send a PIX every second (under 100/1m).
	for _, tok := range tokens[:4] {
		steady.every(200*time.Millisecond, tok, http.MethodGet, "/statement", "")
	}
	for _, tok := range tokens[4:6] {
		steady.every(time.Second, tok, http.MethodPost, "/pix", `{"key":"ops@example.com","amount_cents":100}`)
	}
	defer steady.stop()
	if !prom.waitFor(t, 30*time.Second, `sum(floodgate_decisions_total{gate="statement",outcome="allowed"}) > 150`) {
		t.Fatal("Prometheus never saw the steady load")
	}
	// The limits file changes, and loads; then a broken one is refused
	// and the alert on refused reloads fires.
	writeFile(t, limitsFile, fmt.Sprintf(pixLimits, "# reviewed\n"))
	if !prom.waitFor(t, 15*time.Second, `floodgate_config_load_success_total == 1`) {
		t.Errorf("the change of LIMITS_FILE was not counted as one load: bankapi exports %q", metricLines(t, metrics.URL, "floodgate_config_load_"))
	}
	writeFile(t, limitsFile, "domain: bank\ndescriptors:\n  - key: pix\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if !prom.waitFor(t, 15*time.Second, `ALERTS{alertname="FloodgateConfigReloadFailed",alertstate="firing"}`) {
		t.Error("alert FloodgateConfigReloadFailed did not fire after a refused LIMITS_FILE")
	}
	// 30s of steady load make the baseline of the denial spike (the
	// shipped 1h, 60s here).
	time.Sleep(time.Until(start.Add(30 * time.Second)))
	// A burst: one account reads its statement 40 times a second, 30 of
	// them denied, as long as the statement gate's steady traffic.
	burst := &load{api: api.URL}
	burst.every(25*time.Millisecond, tokens[6], http.MethodGet, "/statement", "")
	spiked := false
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		spiked = spiked || slices.Contains(prom.firing(t), "FloodgateDenialRatioSpike")
	}
	burst.stop()
	if !spiked {
		t.Error("alert FloodgateDenialRatioSpike did not fire during the burst of denials")
	}

	for _, name := range prom.firing(t) {
		if slices.Contains(outageAlerts, name) {
			t.Fatalf("alert %s fires before the outage", name)
		}
	}
	outage := time.Now()
	if err := redis.Stop(); err != nil {
		t.Fatal(err)
	}
	fired := map[string]time.Duration{}
	for deadline := time.Now().Add(30 * time.Second); len(fired) < len(outageAlerts) && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		for _, name := range prom.firing(t) {
			if _, ok := fired[name]; !ok && slices.Contains(outageAlerts, name) {
				fired[name] = time.Since(outage)
			}
		}
	}
	if err := redis.Cont(); err != nil {
		t.Fatal(err)
	}
	for _, name := range outageAlerts {
		if _, ok := fired[name]; !ok {
			t.Errorf("alert %s did not fire within 30s of the Redis outage", name)
		}
	}
	t.Logf("alerts fired after the outage began: %v", fired)
	if !prom.waitFor(t, 20*time.Second, `max(floodgate_breaker_state) == 0 and sum(rate(floodgate_decisions_total{gate="statement",outcome="allowed"}[`+rateInterval+`])) > 0`) {
		t.Error("the breaker did not close and decisions did not recover after Redis continued")
	}
	steady.stop()
	end := time.Now()
	t.Logf("run: %v of load, outage from %v to %v", end.Sub(start).Round(time.Second), outage.Sub(start).Round(time.Second), (outage.Sub(start) + fired[outageAlerts[0]]).Round(time.Second))

	for _, q := range panels {
		prom.checkQuery(t, "panel "+q.panel, q.expr, start, end)
	}
	for _, name := range wantAlerts {
		prom.checkQuery(t, "alert "+name, rules[name], start, end)
	}
}

// TestAlertRules runs the alert rules' unit tests (alerts_test.yaml
// beside them): which outcomes page, on series written out in full, where
// TestDashboardAndAlerts sees only what bankapi's outage produces.
func TestAlertRules(t *testing.T) {
	_, promtool := findPrometheus(t)
	tests := filepath.Join(filepath.Dir(alertsFile), "alerts_test.yaml")
	if out, err := exec.Command(promtool, "test", "rules", tests).CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules %s: %v\n%s", tests, err, out)
	}
}

// findPrometheus returns the paths of prometheus and promtool, or skips
// the test without them, unless FLOODGATE_REQUIRE_PROMETHEUS is set.
func findPrometheus(t *testing.T) (prom, promtool string) {
	prom, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	if err1 != nil || err2 != nil {
		why := "prometheus or promtool is not on PATH (Debian: apt-get install prometheus)"
		if os.Getenv("FLOODGATE_REQUIRE_PROMETHEUS") != "" {
			t.Fatal(why + "; FLOODGATE_REQUIRE_PROMETHEUS is set")
		}
		t.Skip(why)
	}
	return prom, promtool
}

// panelQuery is one query of a dashboard panel.
type panelQuery struct{ panel, expr string }

// dashboardQueries returns every panel's queries, with the dashboard's
// variables as Grafana would fill them: every gate, and the test's rate
// interval.
func dashboardQueries(t *testing.T) []panelQuery {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := strings.NewReplacer("$__rate_interval", rateInterval, "$gate", ".*")
	var qs []panelQuery
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, panelQuery{p.Title, vars.Replace(tg.Expr)})
		}
	}
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
	}
	if want := []string{"Decisions by outcome and policy", "Denial ratio", "Store latency p50 / p99", "Store errors", "Circuit breaker state",
		"Degraded decisions by failure mode", "Throttled waits", "Config reloads", "Overrides"}; !slices.Equal(titles, want) {
		t.Errorf("the dashboard's panels are %q, want %q", titles, want)
	}
	return qs
}

// prometheus is a running Prometheus server.
type prometheus struct {
	url string
}

// startPrometheus starts Prometheus scraping target every second and
// evaluating the shipped rules, with durations shortened, every second.
func startPrometheus(t *testing.T, bin, dir, target string) *prometheus {
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	short := forLine.ReplaceAllString(shortWindows.Replace(string(data)), "$1 "+alertFor)
	if err := os.WriteFile(filepath.Join(dir, "alerts.yaml"), []byte(short), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [alerts.yaml]
scrape_configs:
  - job_name: bankapi
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs := &syncbuf.Buffer{}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.Take())
		}
	})
	p := &prometheus{url: "http://" + addr}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never became ready:\n%s", logs.Take())
		}
	}
}

// api calls Prometheus's HTTP API and decodes its data into v.
func (p *prometheus) api(t *testing.T, path string, params url.Values, v any) {
	t.Helper()
	body := get(t, p.url+path+"?"+params.Encode())
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		t.Fatalf("%s %v: %s %s (%v)", path, params, r.Status, r.Error, err)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// alertRules returns the loaded alert rules' expressions, by name.
func (p *prometheus) alertRules(t *testing.T) map[string]string {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name  string `json:"name"`
				Query string `json:"query"`
				Type  string `json:"type"`
			} `json:"rules"`
		} `json:"groups"`
	}
	p.api(t, "/api/v1/rules", nil, &data)
	rules := map[string]string{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				rules[r.Name] = r.Query
			}
		}
	}
	return rules
}

// firing returns the names of the alerts firing now.
func (p *prometheus) firing(t *testing.T) []string {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.api(t, "/api/v1/alerts", nil, &data)
	var names []string
	for _, a := range data.Alerts {
		if a.State == "firing" && !slices.Contains(names, a.Labels["alertname"]) {
			names = append(names, a.Labels["alertname"])
		}
	}
	return names
}

// waitFor waits until the instant query returns a series.
func (p *prometheus) waitFor(t *testing.T, within time.Duration, query string) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var data struct {
			Result []json.RawMessage `json:"result"`
		}
		p.api(t, "/api/v1/query", url.Values{"query": {query}}, &data)
		if len(data.Result) > 0 {
			return true
		}
	}
	return false
}

// checkQuery evaluates query over [start, end] at every second, and
// requires series with a value, unless query reads a metric of
// notExported: then it requires none.
func (p *prometheus) checkQuery(t *testing.T, what, query string, start, end time.Time) {
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	p.api(t, "/api/v1/query_range", url.Values{"query": {query},
		"start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix()+1, 10)}, "step": {"1"}}, &data)
	var pending []string
	for m, why := range notExported {
		if strings.Contains(query, m) {
			pending = append(pending, m+": "+why)
		}
	}
	switch {
	case len(pending) > 0 && len(data.Result) > 0:
		t.Errorf("%s: %s returned %d series; its metric is exported now, take it out of notExported (%s)", what, query, len(data.Result), pending)
	case len(pending) > 0:
		t.Logf("%s: no series, as expected until it is exported: %s", what, pending)
	case len(data.Result) == 0:
		t.Errorf("%s: %s returned no series over the run", what, query)
	default:
		n := 0
		for _, r := range data.Result {
			n += len(r.Values)
		}
		t.Logf("%s: %d series, %d points", what, len(data.Result), n)
	}
}

// load sends requests on tickers until stopped.
type load struct {
	api  string
	once sync.Once
	done chan struct{}
	wg   sync.WaitGroup
}

var loadClient = &http.Client{Timeout: 5 * time.Second}

// every sends method path with token and body every interval.
func (l *load) every(interval time.Duration, token, method, path, body string) {
	l.once.Do(func() { l.done = make(chan struct{}) })
	l.wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-tick.C:
			}
			req, err := http.NewRequestWithContext(context.Background(), method, l.api+path, strings.NewReader(body))
			if err != nil {
				return // a constant method and path: never
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := loadClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
}

func (l *load) stop() {
	l.once.Do(func() { l.done = make(chan struct{}) })
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	l.wg.Wait()
}

// login returns a token of the account doc.
func login(t *testing.T, api, doc string) string {
	body, _ := json.Marshal(map[string]string{"document": doc, "password": bank.DemoPassword})
	resp, err := http.Post(api+"/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK || r.Token == "" {
		t.Fatalf("login %s: %s, %v", doc, resp.Status, err)
	}
	return r.Token
}

// metricLines returns the lines of the metrics served at url that start
// with prefix.
func metricLines(t *testing.T, url, prefix string) []string {
	t.Helper()
	var lines []string
	for line := range strings.Lines(string(get(t, url))) {
		if strings.HasPrefix(line, prefix) {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}

// get returns the body of url.
func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// writeFile replaces file's content at once, as an editor's save does.
func writeFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(file+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
