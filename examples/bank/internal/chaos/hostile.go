package chaos

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Hostile holds the figures of the hostile-input checks that run on the
// fleet's processes.
type Hostile struct {
	// Login timing: the medians of N wrong-password logins on known
	// accounts and N logins on unknown documents, interleaved, and whether
	// every 401 had the same body. TimingOther counts the answers that were
	// not 401 (a decision that failed closed on a busy machine), left out
	// of the medians.
	TimingN, TimingOther       int
	TimingKnown, TimingUnknown time.Duration
	TimingSameAnswer           bool
	// Spoofing: SpoofAttempts logins from a peer that is not a trusted
	// proxy, each claiming another client address in X-Forwarded-For,
	// Forwarded, X-Real-IP and True-Client-IP; SpoofAdmitted of them went
	// through (the per-IP limit is SpoofLimit).
	SpoofAttempts, SpoofAdmitted, SpoofLimit int
	// Body limit: a BodySize-byte login body; the server answered
	// BodyStatus after the client had sent BodySent bytes.
	BodySize, BodySent int64
	BodyStatus         int
	// Slowloris: a client sending its headers one byte every 100ms was
	// cut off after SlowlorisCut (SlowlorisCutOff false: it never was,
	// within a minute).
	SlowlorisCut    time.Duration
	SlowlorisCutOff bool
}

// LoginTiming measures n logins on known accounts (wrong password) and n
// on unknown documents, sent straight to r (whose trusted proxy the test
// plays: each claims an address of its own in X-Forwarded-For).
func (l *Load) LoginTiming(h *Hostile, n int, r *Replica) {
	var known, unknown []time.Duration
	h.TimingN, h.TimingSameAnswer = n, true
	var first string
	for i := range n {
		for _, u := range []bool{false, true} {
			ip, acct, doc := fmt.Sprintf("198.18.0.%d", i+1), accountName(TimingFirst+i), l.Docs[TimingFirst+i]
			if u {
				ip, acct, doc = fmt.Sprintf("198.18.1.%d", i+1), fmt.Sprintf("t%d", i), l.Unknown[len(l.Unknown)-1-i]
			}
			r, _, body := l.send(req{route: Login, method: "POST", path: "/login", direct: r, account: acct,
				header: map[string]string{"X-Forwarded-For": ip},
				body:   map[string]string{"document": doc, "password": "wrong"}})
			if r.Status != http.StatusUnauthorized {
				h.TimingOther++
				continue
			}
			if first == "" {
				first = string(body)
			}
			h.TimingSameAnswer = h.TimingSameAnswer && string(body) == first
			if u {
				unknown = append(unknown, r.End.Sub(r.Start))
			} else {
				known = append(known, r.End.Sub(r.Start))
			}
		}
	}
	h.TimingKnown, h.TimingUnknown = Percentile(known, 50), Percentile(unknown, 50)
}

// Spoof sends limit+2 logins straight to replica r from 127.0.0.2, which
// is not a trusted proxy, each claiming another client address.
func (l *Load) Spoof(h *Hostile, r *Replica, limit int) {
	h.SpoofAttempts, h.SpoofLimit = limit+2, limit
	for i := range h.SpoofAttempts {
		spoof := fmt.Sprintf("198.51.100.%d", 100+i)
		rec, _, _ := l.send(req{route: Login, method: "POST", path: "/login", direct: r, local: "127.0.0.2",
			account: accountName(stuffingFirst + i),
			header:  map[string]string{"X-Forwarded-For": spoof, "Forwarded": "for=" + spoof, "X-Real-IP": spoof, "True-Client-IP": spoof},
			body:    map[string]string{"document": l.Docs[stuffingFirst+i], "password": "guess"}})
		if rec.Outcome == Admitted {
			h.SpoofAdmitted++
		}
	}
}

// BodyLimit posts a 64 MiB login body straight to replica r.
func BodyLimit(h *Hostile, r *Replica) error {
	const size = 64 << 20
	h.BodySize = size
	var sent atomic.Int64
	body := readerFunc(func(p []byte) (int, error) {
		n := sent.Load()
		if n >= size {
			return 0, io.EOF
		}
		p = p[:min(int64(len(p)), size-n)]
		for i := range p {
			p[i] = ' '
		}
		sent.Add(int64(len(p)))
		return len(p), nil
	})
	req, _ := http.NewRequest("POST", "http://"+r.Addr+"/login", io.NopCloser(body))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = size
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: 64 MiB body: %w", err)
	}
	resp.Body.Close()
	h.BodyStatus, h.BodySent = resp.StatusCode, sent.Load()
	return nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Slowloris opens a connection to replica r and sends a request's headers
// one byte every 100ms, for at most a minute, and records when the server
// cut it off.
func Slowloris(h *Hostile, r *Replica) error {
	conn, err := net.Dial("tcp", r.Addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, bufio.NewReader(conn))
	}()
	start := time.Now()
	msg := "GET /statement HTTP/1.1\r\nHost: bank\r\n" + strings.Repeat("X-Slow: a\r\n", 1000)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; time.Since(start) < time.Minute; i++ {
		select {
		case <-closed:
			h.SlowlorisCut, h.SlowlorisCutOff = time.Since(start), true
			return nil
		case <-tick.C:
		}
		_, _ = conn.Write([]byte{msg[i%len(msg)]})
	}
	return nil
}

// Leaks returns those of secrets that appear in log.
func Leaks(log string, secrets []string) []string {
	var out []string
	for _, s := range secrets {
		if s != "" && strings.Contains(log, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
