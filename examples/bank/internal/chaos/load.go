package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Accounts of the load, by index into Load.Docs.
const (
	ownerAccount    = 0  // logs in with a known device while a botnet hammers it
	firstUser       = 1  // users 1..19: statements, PIX, logins
	users           = 19 // how many
	pixHammer       = 20 // 20, 21: PIX far over the limit
	statementHammer = 22 // 22, 23: statements far over the limit
	probeAccount    = 24 // the recovery probes' account
	stuffingFirst   = 30 // 30..89: targets of credential stuffing
	stuffingLast    = 89
	// TimingFirst is the first of the accounts (to the end of Docs) that
	// only the login-timing measurement uses, on a replica of its own.
	TimingFirst = 90
)

// Load sends the chaos run's traffic and records every answer.
type Load struct {
	// Proxy is the proxy's base URL, "http://127.0.0.1:port".
	Proxy string
	// Replicas are the replicas, which the probes call directly.
	Replicas []*Replica
	// Docs are the documents of the accounts, Unknown documents of no
	// account, Password the accounts' password.
	Docs, Unknown []string
	Password      string
	// Rec receives the records.
	Rec *Recorder
	// Seed seeds the load's random choices.
	Seed uint64

	// issued collects every token and device cookie the service gave out,
	// to look for them in the logs.
	issuedMu sync.Mutex
	issued   []string // guarded by issuedMu

	clientOnce sync.Once
	client     *http.Client // set once by http
	wg         sync.WaitGroup
}

// session is what a client holds after logging in.
type session struct {
	token, cookie string
}

// req is one request of the load.
type req struct {
	route, method, path string
	ip                  string // the simulated client address; "" with direct
	direct              *Replica
	local               string // local address to dial from, for direct requests
	account             string
	sess                session
	device              bool // the cookie in sess is valid for account
	probe               bool // a recovery probe
	body                any
	header              map[string]string
}

// http returns the load's client.
func (l *Load) http() *http.Client {
	l.clientOnce.Do(func() {
		l.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	})
	return l.client
}

// Close releases the load's idle connections.
func (l *Load) Close() { l.http().CloseIdleConnections() }

// Issued returns the tokens and device cookies the service gave out.
func (l *Load) Issued() []string {
	l.issuedMu.Lock()
	defer l.issuedMu.Unlock()
	return append([]string(nil), l.issued...)
}

// send sends q, records it and returns the record and the body.
func (l *Load) send(q req) (Record, http.Header, []byte) {
	var rd io.Reader
	if q.body != nil {
		b, _ := json.Marshal(q.body)
		rd = bytes.NewReader(b)
	}
	base, client := l.Proxy, l.http()
	rec := Record{Route: q.route, Client: q.ip, Account: q.account, Device: q.device}
	if q.direct != nil {
		base = "http://" + q.direct.Addr
		rec.Replica, rec.Probe, rec.Client = q.direct.N, q.probe, "127.0.0.1"
		if q.local != "" {
			rec.Client = q.local
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(q.local)}}
			client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		}
	}
	hr, _ := http.NewRequest(q.method, base+q.path, rd)
	if rd != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if q.ip != "" {
		hr.Header.Set(EdgeHeader, q.ip)
	}
	if q.sess.token != "" {
		hr.Header.Set("Authorization", "Bearer "+q.sess.token)
	}
	if q.sess.cookie != "" {
		hr.AddCookie(&http.Cookie{Name: "fg_device", Value: q.sess.cookie})
	}
	for k, v := range q.header {
		hr.Header.Set(k, v)
	}
	rec.Start = time.Now()
	resp, err := client.Do(hr)
	var body []byte
	var header http.Header
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Status, header = resp.StatusCode, resp.Header
		if n, err := strconv.Atoi(resp.Header.Get(ReplicaHeader)); err == nil {
			rec.Replica = n
		}
	}
	rec.End = time.Now()
	if err != nil {
		rec.Status = 0
	}
	rec.Outcome = Classify(q.route, rec.Status, header)
	l.Rec.Add(rec)
	return rec, header, body
}

// login logs account i (or an unknown document) in with password,
// presenting s's device cookie, and returns the new session (s itself if
// the login failed).
func (l *Load) login(ip, account, doc, password string, s session, direct *Replica) (Record, session) {
	r, h, body := l.send(req{route: Login, method: "POST", path: "/login", ip: ip, direct: direct, account: account,
		sess: session{cookie: s.cookie}, device: s.cookie != "", body: map[string]string{"document": doc, "password": password}})
	if r.Status != http.StatusOK {
		return r, s
	}
	var out struct{ Token string }
	if json.Unmarshal(body, &out) != nil || out.Token == "" {
		return r, s
	}
	s.token = out.Token
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "fg_device" {
			s.cookie = c.Value
		}
	}
	l.issuedMu.Lock()
	l.issued = append(l.issued, s.token, s.cookie)
	l.issuedMu.Unlock()
	return r, s
}

func accountName(i int) string { return "a" + strconv.Itoa(i) }

// Setup logs in every account the load acts as, and returns the sessions
// by account index.
func (l *Load) Setup() (map[int]session, error) {
	out := map[int]session{}
	for _, i := range rangeOf(ownerAccount, probeAccount) {
		r, s := l.login(userIP(i), accountName(i), l.Docs[i], l.Password, session{}, nil)
		if s.token == "" {
			return nil, fmt.Errorf("chaos: setup login of account %d: status %d", i, r.Status)
		}
		out[i] = s
	}
	return out, nil
}

func rangeOf(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// userIP is the client address of account i's owner.
func userIP(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) }

// loop runs step every interval, jittered by ±50%, until ctx is done or
// it ran maxSteps times. Requests are not tied to ctx: one in flight when
// the load stops ends normally.
func (l *Load) loop(ctx context.Context, seed uint64, every time.Duration, step func(rng *rand.Rand)) {
	const maxSteps = 100_000
	l.wg.Go(func() {
		rng := rand.New(rand.NewPCG(l.Seed, seed))
		for range maxSteps {
			if ctx.Err() != nil {
				return
			}
			step(rng)
			t := time.NewTimer(every/2 + time.Duration(rng.Int64N(int64(every))))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	})
}

// Run starts the load, which runs until ctx is done; Wait waits for it.
// sessions are those of Setup.
func (l *Load) Run(ctx context.Context, sessions map[int]session) {
	pix := map[string]any{"key": "chave@example.com", "amount_cents": 1000}
	// The owner logs in with the known device, every 1.5s, while a botnet
	// hammers the account.
	owner := sessions[ownerAccount]
	l.loop(ctx, 1, 1500*time.Millisecond, func(*rand.Rand) {
		_, owner = l.login(userIP(ownerAccount), accountName(ownerAccount), l.Docs[ownerAccount], l.Password, owner, nil)
	})
	// Users: statements, PIX, logins with their device, right and wrong.
	for i := firstUser; i < firstUser+users; i++ {
		s := sessions[i]
		l.loop(ctx, uint64(100+i), 400*time.Millisecond, func(rng *rand.Rand) {
			ip, acct := userIP(i), accountName(i)
			switch p := rng.Float64(); {
			case p < 0.45:
				l.send(req{route: Statement, method: "GET", path: "/statement", ip: ip, account: acct, sess: session{token: s.token}})
			case p < 0.80:
				l.send(req{route: PIX, method: "POST", path: "/pix", ip: ip, account: acct, sess: session{token: s.token}, body: pix})
			case p < 0.90:
				_, s = l.login(ip, acct, l.Docs[i], l.Password, s, nil)
			default:
				l.login(ip, acct, l.Docs[i], "wrong-"+l.Password, s, nil)
			}
		})
	}
	// Hammers: PIX and statements far over their limits.
	for i := pixHammer; i < pixHammer+2; i++ {
		s := sessions[i]
		l.loop(ctx, uint64(200+i), 100*time.Millisecond, func(*rand.Rand) {
			l.send(req{route: PIX, method: "POST", path: "/pix", ip: userIP(i), account: accountName(i), sess: session{token: s.token}, body: pix})
		})
	}
	for i := statementHammer; i < statementHammer+2; i++ {
		s := sessions[i]
		l.loop(ctx, uint64(300+i), 120*time.Millisecond, func(*rand.Rand) {
			l.send(req{route: Statement, method: "GET", path: "/statement", ip: userIP(i), account: accountName(i), sess: session{token: s.token}})
		})
	}
	// A scraper: one address, the statements of many accounts (stolen
	// tokens), over the global per-IP limit.
	var n int
	l.loop(ctx, 400, 60*time.Millisecond, func(*rand.Rand) {
		i := firstUser + n%users
		n++
		l.send(req{route: Statement, method: "GET", path: "/statement", ip: "198.51.100.50", account: accountName(i), sess: session{token: sessions[i].token}})
	})
	// Credential stuffing: three addresses, wrong passwords over many
	// accounts and documents of no account.
	for a := range 3 {
		l.loop(ctx, uint64(500+a), 250*time.Millisecond, func(rng *rand.Rand) {
			ip := fmt.Sprintf("198.51.100.%d", a+1)
			if rng.IntN(4) == 0 {
				u := rng.IntN(len(l.Unknown))
				l.login(ip, "u"+strconv.Itoa(u), l.Unknown[u], "guess", session{}, nil)
				return
			}
			i := stuffingFirst + rng.IntN(stuffingLast-stuffingFirst+1)
			l.login(ip, accountName(i), l.Docs[i], "guess", session{}, nil)
		})
	}
	// A botnet: forty addresses on the owner's account.
	var bot int
	l.loop(ctx, 600, 150*time.Millisecond, func(*rand.Rand) {
		ip := fmt.Sprintf("192.0.2.%d", bot%40+1)
		bot++
		l.login(ip, accountName(ownerAccount), l.Docs[ownerAccount], "guess", session{}, nil)
	})
	// Probes: a statement straight to each replica every 50ms, to time
	// recovery per replica.
	probe := sessions[probeAccount]
	for _, r := range l.Replicas {
		l.loop(ctx, uint64(700+r.N), 50*time.Millisecond, func(*rand.Rand) {
			l.send(req{route: Statement, method: "GET", path: "/statement", direct: r, probe: true, account: accountName(probeAccount), sess: session{token: probe.token}})
		})
	}
}

// Wait waits for the load's loops to end.
func (l *Load) Wait() { l.wg.Wait() }
