package bank

import (
	"log"
	"net/http"
	"time"
)

// Timeouts bounds how long the HTTP server waits on a client, so that a
// slow or silent client (slowloris: headers sent a byte at a time, a body
// that never ends, an idle keep-alive connection) cannot hold a
// connection and its goroutine for ever. The zero value of a field means
// its default, from [DefaultTimeouts].
type Timeouts struct {
	// ReadHeader bounds the reading of a request's headers, from the
	// first byte; a client that trickles them is cut off. Default 5s.
	ReadHeader time.Duration
	// Read bounds the reading of a whole request, body included. Default
	// 10s.
	Read time.Duration
	// Write bounds the time from the end of the request's headers to the
	// end of the response. Default 15s.
	Write time.Duration
	// Idle bounds how long a keep-alive connection waits for the next
	// request. Default 60s.
	Idle time.Duration
	// MaxHeaderBytes bounds the size of a request's headers; larger ones
	// get 431. Default 16 KiB.
	MaxHeaderBytes int
}

// DefaultTimeouts returns the timeouts bankapi serves with.
func DefaultTimeouts() Timeouts {
	return Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 15 * time.Second,
		Idle: 60 * time.Second, MaxHeaderBytes: 16 << 10}
}

// NewHTTPServer returns the server that serves h with the timeouts t (zero
// fields take their defaults), logging its errors (TLS handshakes, panics
// in handlers, accept errors) to errorLog.
func NewHTTPServer(h http.Handler, t Timeouts, errorLog *log.Logger) *http.Server {
	def := DefaultTimeouts()
	or := func(v, d time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return d
	}
	maxHeader := t.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = def.MaxHeaderBytes
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: or(t.ReadHeader, def.ReadHeader),
		ReadTimeout:       or(t.Read, def.Read),
		WriteTimeout:      or(t.Write, def.Write),
		IdleTimeout:       or(t.Idle, def.Idle),
		MaxHeaderBytes:    maxHeader,
		ErrorLog:          errorLog,
	}
}
