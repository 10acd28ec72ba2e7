package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// startInProcess runs bankapi's run in this process with env (on top of
// LISTEN_ADDR=127.0.0.1:0) and the timeouts given, and returns its address
// and its log. t's cleanup stops it and waits for run to return.
func startInProcess(t *testing.T, env map[string]string, timeouts bank.Timeouts) (string, *syncbuf.Buffer) {
	t.Helper()
	getenv := func(k string) string {
		if k == "LISTEN_ADDR" || k == "METRICS_ADDR" && env[k] == "" {
			return "127.0.0.1:0"
		}
		return env[k]
	}
	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, logs, runOptions{ready: ready, timeouts: timeouts}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return addr, logs
	case err := <-done:
		t.Fatalf("run ended before listening: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatal("run did not listen within 30s")
	}
	return "", nil
}

// shortTimeouts are the server timeouts of the slow-client tests.
var shortTimeouts = bank.Timeouts{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond,
	Write: 3 * time.Second, Idle: 400 * time.Millisecond, MaxHeaderBytes: 4 << 10}

// TestSlowClientsAreCutOff plays slowloris-style clients against the
// server: each keeps its connection busy for as long as it can, and the
// server's timeouts must end the exchange long before the client would.
// The time each took is logged as a figure, not asserted: only "cut off
// before the client's 20 s" is.
func TestSlowClientsAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for server timeouts")
	}
	t.Parallel()
	addr, _ := startInProcess(t, nil, shortTimeouts)
	const giveUp = 20 * time.Second // the client's patience: far above every timeout
	for _, tc := range []struct {
		name    string
		opening string        // sent at once
		trickle string        // then sent one byte per step, for ever (repeated)
		timeout time.Duration // the timeout that should end it
		want    string        // what the client sees first: "closed" or a status line prefix
	}{
		{"headers a byte at a time (ReadHeaderTimeout)", "POST /login HTTP/1.1\r\nHost: bank\r\n", "X-Slow: aaaaaaaa\r\n", shortTimeouts.ReadHeader, "closed"},
		{"body a byte at a time (ReadTimeout)", "POST /login HTTP/1.1\r\nHost: bank\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"document\":\"", "1", shortTimeouts.Read, "HTTP/1.1 400"},
		{"idle keep-alive connection (IdleTimeout)", "GET /healthz HTTP/1.1\r\nHost: bank\r\n\r\n", "", shortTimeouts.Idle, "HTTP/1.1 200"},
		{"oversized headers (MaxHeaderBytes)", "GET /healthz HTTP/1.1\r\nHost: bank\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", "", 0, "HTTP/1.1 431"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			first := make(chan string, 1)
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				r := bufio.NewReader(conn)
				line, err := r.ReadString('\n')
				if err != nil {
					first <- "closed"
					return
				}
				first <- strings.TrimSpace(line)
				_, _ = io.Copy(io.Discard, r) // until the server closes
			}()
			start := time.Now()
			_, _ = io.WriteString(conn, tc.opening)
			tick := time.NewTicker(25 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-closed:
					took := time.Since(start)
					got := <-first
					if !strings.HasPrefix(got, tc.want) {
						t.Fatalf("the client saw %q first, want %q", got, tc.want)
					}
					t.Logf("figure: server ended the connection after %v (timeout %v); first thing the client saw: %q", took.Round(time.Millisecond), tc.timeout, got)
					return
				case <-tick.C:
				}
				if time.Since(start) > giveUp {
					t.Fatalf("the server kept the connection for %v", giveUp)
				}
				if tc.trickle != "" {
					_, _ = io.WriteString(conn, tc.trickle[i%len(tc.trickle):i%len(tc.trickle)+1])
				}
			}
		})
	}
}

// countingReader is a JSON-ish body of limit bytes that counts what was
// read. The transport may still read it after the response has arrived.
type countingReader struct {
	prefix string
	n      atomic.Int64
	limit  int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n := c.n.Load()
	if n >= c.limit {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.limit-n)]
	for i := range p {
		if off := n + int64(i); off < int64(len(c.prefix)) {
			p[i] = c.prefix[off]
		} else {
			p[i] = '1'
		}
	}
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// TestBodyLimitEndToEnd sends bodies over the 4 KiB limit through a real
// connection: each is refused with 413 (Content Too Large) after at most a few KiB are read,
// and a huge one is not read to its end.
func TestBodyLimitEndToEnd(t *testing.T) {
	t.Parallel()
	addr, _ := startInProcess(t, nil, bank.Timeouts{})
	token := loginHTTP(t, addr, "127.0.0.1", "000.000.001-91", bank.DemoPassword)
	const huge = 64 << 20
	for _, tc := range []struct {
		name, path string
		size       int64
		chunked    bool
	}{
		{"login 5 KiB", "/login", 5 << 10, false},
		{"pix 5 KiB", "/pix", 5 << 10, false},
		{"login 64 KiB chunked", "/login", 64 << 10, true},
		{"pix 64 MiB", "/pix", huge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingReader{prefix: `{"document":"`, limit: tc.size}
			sent := func() int64 { return body.n.Load() }
			if tc.path == "/pix" {
				body.prefix = `{"key":"`
			}
			req, _ := http.NewRequest("POST", "http://"+addr+tc.path, io.NopCloser(body))
			if !tc.chunked {
				req.ContentLength = tc.size
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
			defer client.CloseIdleConnections()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s: %v (after sending %d bytes)", tc.name, err, sent())
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s: status %d, want 413", tc.name, resp.StatusCode)
			}
			if n := sent(); tc.size == huge && n >= huge {
				t.Fatalf("the server read all %d bytes of an over-limit body", n)
			}
			t.Logf("figure: %s refused with 413 after the client sent %d of %d bytes", tc.name, sent(), tc.size)
		})
	}
}

// loginHTTP logs document in through addr, from the client address ip
// (sent as X-Forwarded-For; it counts only when the peer is trusted), and
// returns the token.
func loginHTTP(t *testing.T, addr, ip, document, password string) string {
	t.Helper()
	resp, body := post(t, nil, addr, "/login", ip, fmt.Sprintf(`{"document":%q,"password":%q}`, document, password))
	var out struct{ Token string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || out.Token == "" {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	return out.Token
}

// post sends body to addr+path with client (nil: a new one) and the
// forwarding header xff if not empty.
func post(t *testing.T, client *http.Client, addr, path, xff, body string) (*http.Response, []byte) {
	t.Helper()
	if client == nil {
		client = &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
		defer client.CloseIdleConnections()
	}
	req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// clientFrom returns an HTTP client whose connections leave from the
// loopback address local, so that the server sees it as the peer.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
}

// TestSpoofedForwardingFromUntrustedPeer sends login attempts from a peer
// that is not a trusted proxy (127.0.0.2; only 127.0.0.1 is trusted), each
// claiming another client address in every forwarding header there is:
// the server must key them all on the peer, and block it after the
// per-IP limit as if no header had been sent. The same claims from the
// trusted proxy are believed, which shows the headers are read at all.
func TestSpoofedForwardingFromUntrustedPeer(t *testing.T) {
	t.Parallel()
	addr, _ := startInProcess(t, map[string]string{
		"TRUSTED_PROXIES": "127.0.0.1/32",
		"LIMIT_LOGIN_IP":  "3/1m",
	}, bank.Timeouts{})
	docs := bank.DemoDocuments(bank.DemoUsers)
	attempt := func(client *http.Client, i int) int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/login",
			strings.NewReader(fmt.Sprintf(`{"document":%q,"password":"wrong"}`, docs[i])))
		req.Header.Set("Content-Type", "application/json")
		spoof := fmt.Sprintf("198.51.100.%d", i+1)
		req.Header.Set("X-Forwarded-For", spoof)
		req.Header.Add("X-Forwarded-For", spoof+", "+spoof)
		req.Header.Set("Forwarded", "for="+spoof)
		req.Header.Set("X-Real-IP", spoof)
		req.Header.Set("True-Client-IP", spoof)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name string
		peer string
		want []int
	}{
		{"untrusted peer: headers ignored, one key", "127.0.0.2", []int{401, 401, 401, 429, 429, 429}},
		{"trusted proxy: headers believed, six keys", "127.0.0.1", []int{401, 401, 401, 401, 401, 401}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := clientFrom(tc.peer)
			defer client.CloseIdleConnections()
			var got []int
			for i := range tc.want {
				base := 0
				if tc.peer == "127.0.0.1" {
					base = 10 // other accounts, so that the account limit stays out of the way
				}
				got = append(got, attempt(client, base+i))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("statuses %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLogsHoldNoSecrets runs logins (right and wrong, documents with and
// without punctuation, a malformed body that holds a document), PIX and
// statements with debug logging, and checks that the log
// holds neither a document, the token secret, a password, a token nor a
// device cookie.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token-secret-that-must-never-be-logged"
	doc := bank.DemoDocuments(3)[2] // 00000000353
	formatted := string(doc[:3]) + "." + string(doc[3:6]) + "." + string(doc[6:9]) + "-" + string(doc[9:])
	addr, logs := startInProcess(t, map[string]string{
		"TOKEN_SECRET": secret, "LOG_LEVEL": "debug", "LOG_FORMAT": "json", "TRUSTED_PROXIES": "127.0.0.1",
	}, bank.Timeouts{})
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var leaks []string // values that must not appear
	for _, d := range []string{string(doc), formatted} {
		post(t, client, addr, "/login", "203.0.113.9", fmt.Sprintf(`{"document":%q,"password":"wrong-password-1"}`, d))
		post(t, client, addr, "/login", "203.0.113.9", fmt.Sprintf(`{"document":%q,"password":`, d)) // malformed
		post(t, client, addr, "/login", "203.0.113.9", fmt.Sprintf(`{"document":%q,"password":"x","extra":1}`, d))
		resp, body := post(t, client, addr, "/login", "203.0.113.9", fmt.Sprintf(`{"document":%q,"password":%q}`, d, bank.DemoPassword))
		var out struct{ Token string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
			t.Fatalf("login: %d %s", resp.StatusCode, body)
		}
		leaks = append(leaks, out.Token)
		for _, c := range resp.Cookies() {
			leaks = append(leaks, c.Value)
		}
		for _, path := range []string{"/pix", "/statement"} {
			method, rb := "GET", ""
			if path == "/pix" {
				method, rb = "POST", `{"key":"`+formatted+`","amount_cents":100}`
			}
			req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(rb))
			req.Header.Set("Authorization", "Bearer "+out.Token)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	log := logs.String()
	if !strings.Contains(log, `"msg":"login"`) || !strings.Contains(log, `"msg":"login failed"`) {
		t.Fatalf("the log lacks the login lines, so the check below proves nothing:\n%s", log)
	}
	leaks = append(leaks, secret, string(doc), formatted, "wrong-password-1", bank.DemoPassword)
	for _, s := range leaks {
		if s != "" && strings.Contains(log, s) {
			t.Errorf("the log holds %q:\n%s", s, log)
		}
	}
}

// /metrics is served on METRICS_ADDR only, never on the public listener:
// its policy label would tell which limit refused an opaque login.
func TestMetricsListenApart(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"LISTEN_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0"}[k]
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, metricsReady := make(chan string, 1), make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, getenv, io.Discard, runOptions{ready: ready, metricsReady: metricsReady})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	var addr, maddr string
	for addr == "" || maddr == "" {
		select {
		case addr = <-ready:
		case maddr = <-metricsReady:
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("run ended before listening: %v", err)
		}
	}
	for _, tc := range []struct {
		addr, path string
		want       int
	}{
		{addr, "/metrics", http.StatusNotFound},
		{addr, "/healthz", http.StatusOK},
		{maddr, "/metrics", http.StatusOK},
		{maddr, "/login", http.StatusNotFound},
	} {
		resp, err := http.Get("http://" + tc.addr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s on %s: %d, want %d", tc.path, tc.addr, resp.StatusCode, tc.want)
		}
		if tc.addr == maddr && tc.path == "/metrics" && !strings.Contains(string(body), "floodgate_decisions_total") {
			t.Errorf("the metrics listener lacks floodgate's series:\n%s", body)
		}
	}
}
