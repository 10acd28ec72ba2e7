package bank

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// ErrBadToken reports a token or device cookie that is malformed, forged or
// expired. Callers answer 401 and never say which.
var ErrBadToken = errors.New("bank: bad token")

// Keys derives the service's secrets from one master secret, one HMAC key
// per purpose, so that a token can never pass as a device cookie and
// neither reveals the key that hides documents.
type Keys struct {
	token, device, account []byte
}

// NewKeys derives the keys from secret; replicas that share a store must
// share the secret.
func NewKeys(secret []byte) Keys {
	derive := func(purpose string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(purpose))
		return m.Sum(nil)
	}
	return Keys{token: derive("floodgate bank token v1"), device: derive("floodgate bank device v1"), account: derive("floodgate bank account v1")}
}

// AccountID is the account's identity in tokens, limiter keys and logs: an
// HMAC of the document, so no store ever holds a CPF in clear.
func (k Keys) AccountID(d Document) string {
	m := hmac.New(sha256.New, k.account)
	m.Write([]byte(d))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Token is a bearer token for account that expires at exp.
func (k Keys) Token(account string, exp time.Time) string {
	return sign(k.token, account+"."+strconv.FormatInt(exp.Unix(), 10))
}

// VerifyToken returns the account of a valid token at now.
func (k Keys) VerifyToken(token string, now time.Time) (account string, err error) {
	fields, err := verify(k.token, token, 2, now)
	if err != nil {
		return "", err
	}
	return fields[0], nil
}

// DeviceCookie is the value of a device cookie that binds device to account
// until exp (OWASP "device cookies"), and to the account's credential (see
// [Directory.Credential]): once the password changes, the cookie is void.
func (k Keys) DeviceCookie(account, device string, credential []byte, exp time.Time) string {
	return sign(k.deviceKey(credential), account+"."+device+"."+strconv.FormatInt(exp.Unix(), 10))
}

// VerifyDeviceCookie returns the device of a valid cookie for account and
// its current credential.
func (k Keys) VerifyDeviceCookie(cookie, account string, credential []byte, now time.Time) (device string, err error) {
	fields, err := verify(k.deviceKey(credential), cookie, 3, now)
	if err != nil {
		return "", err
	}
	if !hmac.Equal([]byte(fields[0]), []byte(account)) {
		return "", ErrBadToken
	}
	return fields[1], nil
}

// deviceKey is the key that signs the device cookies of a credential.
func (k Keys) deviceKey(credential []byte) []byte {
	m := hmac.New(sha256.New, k.device)
	m.Write(credential)
	return m.Sum(nil)
}

// sign returns payload, a dot and its base64url HMAC.
func sign(key []byte, payload string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify checks the MAC and expiry of a signed value of n dot-separated
// fields, the last of which is the expiry in Unix seconds, and returns
// the fields.
func verify(key []byte, signed string, n int, now time.Time) ([]string, error) {
	if len(signed) > 512 {
		return nil, ErrBadToken
	}
	i := strings.LastIndexByte(signed, '.')
	if i < 0 {
		return nil, ErrBadToken
	}
	payload, mac := signed[:i], signed[i+1:]
	// Strict: one token, one spelling. Without it the unused low bits of
	// the last character make four spellings of every MAC.
	got, err := base64.RawURLEncoding.Strict().DecodeString(mac)
	if err != nil {
		return nil, ErrBadToken
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	if !hmac.Equal(got, m.Sum(nil)) {
		return nil, ErrBadToken
	}
	fields := strings.Split(payload, ".")
	if len(fields) != n {
		return nil, ErrBadToken
	}
	exp, err := strconv.ParseInt(fields[n-1], 10, 64)
	if err != nil || now.Unix() >= exp {
		return nil, ErrBadToken
	}
	return fields, nil
}
