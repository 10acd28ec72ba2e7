package scenario

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
)

// Simulated client addresses (documentation ranges, RFC 5737).
const (
	ownerIP  = "203.0.113.10"
	officeIP = "203.0.113.50"
	scanIP   = "198.51.100.7"
)

func botIP(i int) string { return fmt.Sprintf("192.0.2.%d", i+1) }

// scenarios plays scenarios 1 to 6 against the fleet.
type scenarios struct {
	f        Fleet
	c        *client
	out      *report
	docs     []bank.Document
	scan429  response // a 429 of scenario 3, to compare with scenario 4's
	ownerDev string   // the owner's device cookie, from an earlier login
}

func (s *scenarios) doc(i int) string { return string(s.docs[i]) }

// mustLogin logs the owner in and returns the token.
func (s *scenarios) mustLogin(doc string) (string, error) {
	r, token, _, err := s.c.login(ownerIP, doc, bank.DemoPassword, "")
	if err != nil {
		return "", err
	}
	if token == "" {
		return "", fmt.Errorf("login answered %d: %s\n%s", r.status, r.body, s.f.Logs())
	}
	return token, nil
}

// pixBurst: one account sends 12 PIX spread over the three replicas.
func (s *scenarios) pixBurst() error {
	s.out.title("1. PIX burst: one account sends 12 PIX through the proxy (10 per minute per account)")
	token, err := s.mustLogin(s.doc(0))
	if err != nil {
		return err
	}
	s.out.row("#", "replica", "status", "RateLimit", "Retry-After")
	created, refused, retry := 0, 0, 0
	for i := range 12 {
		r, err := s.c.pix(ownerIP, token)
		if err != nil {
			return err
		}
		s.out.row(i+1, r.replica(), r.status, r.header.Get("RateLimit"), r.retryAfter())
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			refused++
			retry, _ = strconv.Atoi(r.retryAfter())
		}
	}
	s.out.expect(created == 10 && refused == 2, "%d created, %d refused with 429 (expected 10 and 2), though the replicas took turns", created, refused)
	s.out.expect(retry >= 55 && retry <= 60, "Retry-After %d s (expected near 60)", retry)
	return nil
}

// office: 50 accounts behind one IP send 10 PIX each.
func (s *scenarios) office() error {
	s.out.title("2. Office: 50 accounts behind one IP log in and send 10 PIX each")
	statuses := map[int]int{}
	logins := map[int]int{}
	for a := range 50 {
		r, token, _, err := s.c.login(officeIP, s.doc(10+a), bank.DemoPassword, "")
		if err != nil {
			return err
		}
		logins[r.status]++
		for range 10 {
			r, err := s.c.pix(officeIP, token)
			if err != nil {
				return err
			}
			statuses[r.status]++
		}
	}
	s.out.row("requests", "answers")
	s.out.row("50 logins", fmt.Sprint(logins))
	s.out.row("500 PIX", fmt.Sprint(statuses))
	ok := logins[http.StatusOK] == 50 && statuses[http.StatusCreated] == 500
	s.out.expect(ok, "all 50 logins and all 500 PIX succeeded: PIX is keyed by account, and successful logins do not count")
	if !ok {
		s.out.note("replica logs: %s", s.f.Logs())
	}
	return nil
}

// oneIPManyAccounts: one IP tries 15 accounts with a wrong password.
func (s *scenarios) oneIPManyAccounts() error {
	s.out.title("3. One IP tries 15 accounts with wrong passwords (10 attempts per IP per 10 min)")
	s.out.row("#", "status", "Retry-After")
	checked, limited := 0, 0
	for i := range 15 {
		r, _, _, err := s.c.login(scanIP, s.doc(70+i), "guess", "")
		if err != nil {
			return err
		}
		s.out.row(i+1, r.status, r.retryAfter())
		switch r.status {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
			limited++
			s.scan429 = r
		}
	}
	s.out.expect(checked == 10 && limited == 5, "%d reached the password check (401), %d got 429 (expected 10 and 5)", checked, limited)
	return nil
}

// botnet: 50 attempts on one account, each from its own IP, while the
// owner, with the device cookie of an earlier login, still gets in.
func (s *scenarios) botnet() error {
	s.out.title("4. Botnet: 50 attempts on one account, each from a different IP (5 per account per 10 min)")
	target := s.doc(1)
	_, _, device, err := s.c.login(ownerIP, target, bank.DemoPassword, "") // yesterday, from home
	if err != nil || device == "" {
		return fmt.Errorf("owner's first login: %v", err)
	}
	s.ownerDev = device
	checked, limited, identical := 0, 0, 0
	var first429 response
	for i := range 50 {
		r, _, _, err := s.c.login(botIP(i), target, "guess"+strconv.Itoa(i), "")
		if err != nil {
			return err
		}
		switch r.status {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
			limited++
			if first429.status == 0 {
				first429 = r
			}
			if sameAnswer(r, s.scan429) {
				identical++
			}
		}
	}
	s.out.row("attempts", "401 (password checked)", "429", "429 identical to scenario 3's")
	s.out.row(50, checked, limited, identical)
	s.out.expect(checked == 5 && limited == 45, "%d reached the password check, %d got 429 (expected 5 and 45)", checked, limited)
	s.out.expect(identical == limited, "every 429 is byte-identical (status, headers but Date, body) to the IP-blocked 429 of scenario 3:\n       %s", first429.body)

	s.out.title("5. The owner logs in during the attack, with the device cookie of an earlier login")
	r, _, _, err := s.c.login(ownerIP, target, bank.DemoPassword, s.ownerDev)
	if err != nil {
		return err
	}
	without, _, _, err := s.c.login(ownerIP, target, bank.DemoPassword, "")
	if err != nil {
		return err
	}
	s.out.row("owner's login", "status")
	s.out.row("with device cookie", r.status)
	s.out.row("without (a new device)", without.status)
	s.out.expect(r.status == http.StatusOK, "with its device cookie the owner is limited on the device's own key, not the account's: %d", r.status)
	s.out.expect(without.status == http.StatusTooManyRequests, "a new device shares the attacked account's key and waits: %d", without.status)
	return nil
}

// sameAnswer compares two answers byte for byte, but for the Date field
// and the replica that served them.
func sameAnswer(a, b response) bool {
	strip := func(h http.Header) string {
		h = h.Clone()
		h.Del("Date")
		h.Del("X-Demo-Replica")
		var buf bytes.Buffer
		h.Write(&buf)
		return buf.String()
	}
	return a.status == b.status && bytes.Equal(a.body, b.body) && strip(a.header) == strip(b.header)
}

// outage: Redis stops; login and PIX fail closed, the statement stays
// open, and the logs say so; Redis comes back and limits resume.
func (s *scenarios) outage() error {
	s.out.title("6. Redis down: login and PIX fail closed (429), the statement stays open (200)")
	token, err := s.mustLogin(s.doc(2))
	if err != nil {
		return err
	}
	s.f.Logs()
	if err := s.f.StopRedis(); err != nil {
		return err
	}
	s.out.row("route", "replica", "status", "latency")
	var worst time.Duration
	codes := map[string][]int{}
	for range 3 {
		for _, rt := range []string{"login", "pix", "statement"} {
			var r response
			switch rt {
			case "login":
				r, _, _, err = s.c.login(ownerIP, s.doc(2), bank.DemoPassword, "")
			case "pix":
				r, err = s.c.pix(ownerIP, token)
			default:
				r, err = s.c.statement(ownerIP, token)
			}
			if err != nil {
				return err
			}
			worst = max(worst, r.latency)
			codes[rt] = append(codes[rt], r.status)
			s.out.row(rt, r.replica(), r.status, ms(r.latency))
		}
	}
	all := func(rt string, code int) bool {
		for _, c := range codes[rt] {
			if c != code {
				return false
			}
		}
		return true
	}
	s.out.expect(all("login", 429) && all("pix", 429) && all("statement", 200), "login and PIX answered 429, the statement 200, on every replica")
	s.out.expect(worst < time.Second, "slowest answer during the outage: %s (the decision budget is 300ms)", ms(worst))
	logs := s.f.Logs()
	s.out.expect(strings.Contains(logs, "failed_closed") || strings.Contains(logs, "fail"), "the replicas logged the degraded decisions:")
	for line := range strings.Lines(logs) {
		s.out.note("   log: %s", strings.TrimSpace(line))
	}

	if err := s.f.RestartRedis(); err != nil {
		return err
	}
	// Each replica reconnects on its own: wait until three PIX in a row
	// (one per replica) go through.
	start := time.Now()
	created, inARow := 0, 0
	for inARow < 3 && time.Since(start) < 15*time.Second {
		r, err := s.c.pix(ownerIP, token)
		if err != nil {
			return err
		}
		if r.status == http.StatusCreated {
			created++
			inARow++
		} else {
			inARow = 0
			time.Sleep(100 * time.Millisecond)
		}
	}
	s.out.expect(inARow == 3, "Redis back: every replica decides on Redis again after %v, with no restart of anything", time.Since(start).Round(100*time.Millisecond))
	// Until the limit: a 429 naming pix with nothing remaining. A
	// fail-closed 429 (a decision over its budget on a loaded machine) is
	// not the limit; it recorded nothing, so it is simply sent again.
	var last response
	limitHit := func(r response) bool {
		return r.status == http.StatusTooManyRequests && strings.Contains(r.header.Get("RateLimit"), `"pix";r=0`)
	}
	for attempts := 0; attempts < 30; attempts++ {
		if last, err = s.c.pix(ownerIP, token); err != nil {
			return err
		}
		if last.status == http.StatusCreated {
			created++
		}
		if limitHit(last) {
			break
		}
	}
	s.out.expect(created == 10 && limitHit(last), "and the limit holds again: %d created since Redis came back, then %d (%s)", created, last.status, last.header.Get("RateLimit"))
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
