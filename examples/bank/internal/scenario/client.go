package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// client sends the demo's requests through the proxy, as a user at a
// given client address.
type client struct {
	base string
	http *http.Client
}

// response is what the demo looks at in an answer.
type response struct {
	status  int
	header  http.Header
	body    []byte
	latency time.Duration
}

func (r response) retryAfter() string { return r.header.Get("Retry-After") }
func (r response) replica() string    { return r.header.Get("X-Demo-Replica") }

// do sends a request from ip with an optional bearer token, device cookie
// and JSON body.
func (c *client) do(method, path, ip, token, device string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set(EdgeHeader, ip)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if device != "" {
		req.AddCookie(&http.Cookie{Name: "fg_device", Value: device})
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b, latency: time.Since(start)}, nil
}

// login logs the document in from ip and returns the token and the device
// cookie it was given.
func (c *client) login(ip, document, password, device string) (response, string, string, error) {
	r, err := c.do("POST", "/login", ip, "", device, map[string]string{"document": document, "password": password})
	if err != nil || r.status != http.StatusOK {
		return r, "", "", err
	}
	var out struct{ Token string }
	if err := json.Unmarshal(r.body, &out); err != nil {
		return r, "", "", fmt.Errorf("login answer: %w", err)
	}
	for _, ck := range (&http.Response{Header: r.header}).Cookies() {
		if ck.Name == "fg_device" {
			device = ck.Value
		}
	}
	return r, out.Token, device, nil
}

func (c *client) pix(ip, token string) (response, error) {
	return c.do("POST", "/pix", ip, token, "", map[string]any{"key": "chave@example.com", "amount_cents": 1000})
}

func (c *client) statement(ip, token string) (response, error) {
	return c.do("GET", "/statement", ip, token, "", nil)
}
