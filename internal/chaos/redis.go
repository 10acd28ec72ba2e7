package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// redisCommand sends one command to the Redis at addr on a new connection
// and returns its reply as text: a status, an integer, a bulk string, or
// the elements of an array joined by newlines. An error reply is an error.
func redisCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("chaos: empty Redis reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		var n int
		if _, err := fmt.Sscan(line[1:], &n); err != nil || n < -1 {
			return "", fmt.Errorf("chaos: bad bulk reply %q", line)
		}
		if n == -1 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		var n int
		if _, err := fmt.Sscan(line[1:], &n); err != nil || n > 1<<16 {
			return "", fmt.Errorf("chaos: bad array reply %q", line)
		}
		var parts []string
		for range n {
			s, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("chaos: unexpected Redis reply %q", line)
}
