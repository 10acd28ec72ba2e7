package bank

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// redactURL returns raw, a URL that may not parse, with its credentials
// replaced by "xxxxx": everything between "://" and the last "@" but the
// user name ("redis://user:xxxxx@host"), all of it when there is no user
// name or no password ("redis://xxxxx@host": a lone user part may be a
// token). It works on the text, so a URL that url.Parse refuses is
// redacted too; a stray "@" later in the URL only redacts more.
func redactURL(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return raw
	}
	start := len(raw) - len(rest)
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass || user == "" {
		return raw[:start] + "xxxxx" + rest[at:]
	}
	return raw[:start] + user + ":xxxxx" + rest[at:]
}

// redactedError is an error about a URL whose text has the URL's
// credentials replaced. It does not unwrap, since the error it replaces
// still carries them; errors.Is still sees through it.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string        { return e.msg }
func (e redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// redactErr returns err with every spelling of raw's credentials removed
// from its text: as written, percent-decoded, and quoted as %q quotes
// them. It returns err itself when raw carries no credentials.
func redactErr(err error, raw string) error {
	if err == nil {
		return nil
	}
	redacted := redactURL(raw)
	if redacted == raw {
		return err
	}
	_, rest, _ := strings.Cut(raw, "://")
	userinfo := rest[:strings.LastIndexByte(rest, '@')]
	secrets := []string{userinfo}
	if _, pass, ok := strings.Cut(userinfo, ":"); ok {
		secrets = append(secrets, pass)
	}
	for _, s := range slices.Clone(secrets) {
		if dec, err := url.PathUnescape(s); err == nil {
			secrets = append(secrets, dec)
		}
		if q := strconv.Quote(s); len(q) > 2 {
			secrets = append(secrets, q[1:len(q)-1])
		}
	}
	msg := strings.ReplaceAll(err.Error(), raw, redacted)
	if q := strconv.Quote(raw); len(q) > 2 {
		msg = strings.ReplaceAll(msg, q[1:len(q)-1], redacted)
	}
	for _, s := range secrets {
		if len(s) >= 3 { // a one- or two-byte secret would blank the message
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return redactedError{msg: msg, err: err}
}
