package redisopt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/redis/rueidis"
)

// The query parameters that floodgate reads beside rueidis's, for what a
// Redis URL cannot say otherwise (the names follow libpq's sslcert,
// sslkey and sslrootcert, which put TLS files in a connection URL too):
//
//	tls_cert=PATH, tls_key=PATH   a client certificate and its key, in PEM
//	tls_ca=PATH                   CA certificates (PEM) trusted beside the system's roots
//	tls_skip_hostname=true        verify the server's chain, not the name it holds
//	sentinel_tls=true             the sentinels over TLS too, with the same settings
//	sentinel_user=NAME, sentinel_password=PASSWORD   the sentinels' credentials
//
// The tls_ ones need a rediss:// URL and the sentinel_ ones master_set.
// They are envoyproxy/ratelimit's REDIS_TLS_CLIENT_CERT, _KEY,
// REDIS_TLS_CACERT, REDIS_TLS_SKIP_HOSTNAME_VERIFICATION and
// REDIS_SENTINEL_AUTH, with upstream's meaning.
const (
	paramCert         = "tls_cert"
	paramKey          = "tls_key"
	paramCA           = "tls_ca"
	paramSkipHostname = "tls_skip_hostname"
	paramSentinelTLS  = "sentinel_tls"
	paramSentinelUser = "sentinel_user"
	// ParamSentinelPassword is the query parameter of the sentinels'
	// password: [Redact] hides its value as it hides the URL's password.
	ParamSentinelPassword = "sentinel_password"
)

// extras applies floodgate's query parameters of u (a URL that parsed) to
// opt. The files are read now: a file that is missing or holds no
// certificate is an error naming it.
func extras(u string, opt *rueidis.ClientOption) error {
	pu, err := url.Parse(u)
	if err != nil {
		return err
	}
	q := pu.Query()
	tlsURL := pu.Scheme == "rediss" || pu.Scheme == "valkeys"
	var errs []error
	boolean := func(name string) bool {
		if !q.Has(name) {
			return false
		}
		b, err := strconv.ParseBool(q.Get(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not true or false", name, q.Get(name)))
		}
		return b
	}
	cert, key, ca := q.Get(paramCert), q.Get(paramKey), q.Get(paramCA)
	skip, sentTLS := boolean(paramSkipHostname), boolean(paramSentinelTLS)
	if !tlsURL {
		for _, name := range []string{paramCert, paramKey, paramCA, paramSkipHostname, paramSentinelTLS} {
			if q.Has(name) {
				errs = append(errs, fmt.Errorf("%s is set but the URL is not rediss://", name))
			}
		}
	}
	if opt.Sentinel.MasterSet == "" {
		for _, name := range []string{paramSentinelTLS, paramSentinelUser, ParamSentinelPassword} {
			if q.Has(name) {
				errs = append(errs, fmt.Errorf("%s is set but the URL has no master_set (not Sentinel)", name))
			}
		}
	}
	if (cert == "") != (key == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: set both or neither", paramCert, paramKey))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	opt.Sentinel.Username, opt.Sentinel.Password = q.Get(paramSentinelUser), q.Get(ParamSentinelPassword)
	if !tlsURL {
		return nil
	}
	tc := opt.TLSConfig // rueidis's: TLS 1.2 or later, the URL's host as the server name
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", paramCert, paramKey, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("%s: %w", paramCA, err)
		}
		// As upstream: the system's roots and the CA's certificates.
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: %s holds no PEM certificate", paramCA, ca)
		}
		tc.RootCAs = pool
	}
	if skip && !tc.InsecureSkipVerify {
		verifyChainOnly(tc)
	}
	if opt.Sentinel.MasterSet != "" {
		// The master is found through the sentinels: its certificate is
		// verified against its own address (tls.Dialer's server name when
		// none is set), not the first sentinel's host that rueidis sets.
		tc.ServerName = ""
		if sentTLS {
			opt.Sentinel.TLSConfig = tc.Clone()
		}
	}
	return nil
}

// verifyChainOnly makes tc verify the server's certificate chain against
// its roots (the system's when nil) but not the name the certificate
// holds, as envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
// does: for a Redis reached by an address its certificate does not name.
func verifyChainOnly(tc *tls.Config) {
	tc.InsecureSkipVerify = true // Go's check, which verifies the name too, is replaced by VerifyConnection's
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		return verifyChain(tc.RootCAs, cs, "")
	}
}

// verifyChain verifies the peer's certificate of cs against roots, and
// the name it holds against name unless name is empty.
func verifyChain(roots *x509.CertPool, cs tls.ConnectionState, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: name, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("tls: failed to verify certificate: %w", err)
	}
	return nil
}
