// Package syncbuf is a bytes buffer that many goroutines may write at once:
// where tests, the demo and test servers collect logs and process output.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. The zero value is an
// empty buffer ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Take returns what was written since the last Take and empties the
// buffer.
func (b *Buffer) Take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}
