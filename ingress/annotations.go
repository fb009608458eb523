package ingress

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
	networkingv1 "k8s.io/api/networking/v1"
)

// options are what an Ingress's annotations ask for, parsed and checked:
// ingress-nginx's meaning (docs/user-guide/nginx-configuration/
// annotations.md), read under nginxPrefix and batonPrefix.
type options struct {
	upstream bool // service-upstream

	sslRedirect, forceSSLRedirect bool

	useRegex      bool
	rewriteTarget string // "": none
	appRoot       string

	redirectURL  *url.URL // permanent-redirect or temporal-redirect
	redirectCode int

	backendTLS      bool   // backend-protocol HTTPS or GRPCS
	backendProtocol string // config.Backend.Protocol: h2c for GRPC, h2 for GRPCS; "" HTTP/1.1
	// sslPassthrough: the hosts' TLS connections go to the backend of
	// their path "/" as TCP streams, not terminated (ssl-passthrough).
	sslPassthrough  bool
	connectTimeout  time.Duration
	readTimeout     time.Duration
	sendTimeout     time.Duration
	bodySize        int64 // -1: not set; 0: no limit
	upstreamVhost   string
	forwardedPrefix string

	access *route.Access // the source ranges; nil: any client
	cors   *route.CORS   // enable-cors; nil: none
	limit  *route.RateLimit
	conns  int // limit-connections

	customHeaders   string                // custom-headers: the ConfigMap's name
	responseHeaders *route.HeaderModifier // its fields, resolved by the translator

	affinityCookie string // "": no affinity
	cookiePath     string
	cookieMaxAge   time.Duration
	cookieSameSite string
	hashHeader     string // upstream-hash-by $http_NAME

	canary            bool
	canaryWeight      int
	canaryTotal       int
	canaryHeader      string
	canaryHeaderValue string
	canaryHeaderRegex string // canary-by-header-pattern
	canaryCookie      string

	// auth-tls-*: the CA Secret's name (in the Ingress's namespace; ""
	// none), how clients are verified, and whether their certificate
	// goes upstream.
	authSecret string
	authVerify string
	authDepth  int
	authPass   bool
	authCN     string // auth-tls-match-cn
	authPage   string // auth-tls-error-page
	authCA     []byte // the Secret's ca.crt, read by Translate
}

// implemented are the annotations (under either prefix) baton serves.
var implemented = map[string]bool{
	"service-upstream": true, "ssl-redirect": true, "force-ssl-redirect": true,
	"use-regex": true, "rewrite-target": true, "app-root": true,
	"permanent-redirect": true, "permanent-redirect-code": true, "temporal-redirect": true, "temporal-redirect-code": true,
	"backend-protocol": true, "ssl-passthrough": true, "proxy-connect-timeout": true, "proxy-read-timeout": true, "proxy-send-timeout": true, "proxy-body-size": true,
	"upstream-vhost": true, "x-forwarded-prefix": true,
	"affinity": true, "session-cookie-name": true, "session-cookie-path": true, "session-cookie-expires": true,
	"session-cookie-max-age": true, "session-cookie-samesite": true, "upstream-hash-by": true,
	"enable-cors": true, "cors-allow-origin": true, "cors-allow-methods": true, "cors-allow-headers": true,
	"cors-expose-headers": true, "cors-allow-credentials": true, "cors-max-age": true,
	"custom-headers": true,
	"limit-rps":      true, "limit-rpm": true, "limit-burst-multiplier": true,
	"whitelist-source-range": true, "allowlist-source-range": true, "denylist-source-range": true,
	"auth-tls-secret": true, "auth-tls-verify-client": true, "auth-tls-verify-depth": true, "auth-tls-pass-certificate-to-upstream": true,
	"auth-tls-match-cn": true, "auth-tls-error-page": true,
	"canary": true, "canary-weight": true, "canary-weight-total": true, "canary-by-header": true, "canary-by-header-value": true, "canary-by-header-pattern": true, "canary-by-cookie": true,
}

// parseOptions reads ing's annotations. Those under the prefixes that
// baton does not implement are returned by name (said, not ignored in
// silence); a value that does not parse is an error, which refuses the
// Ingress.
func parseOptions(ing *networkingv1.Ingress) (options, []string, error) {
	o := options{sslRedirect: true, bodySize: -1, canaryTotal: 100}
	var unknown []string
	for a := range ing.Annotations {
		name, ok := strings.CutPrefix(a, nginxPrefix)
		if !ok {
			name, ok = strings.CutPrefix(a, batonPrefix)
		}
		if ok && !implemented[name] {
			unknown = append(unknown, a)
		}
	}
	if upstream(ing) {
		o.upstream = true
	}
	slices.Sort(unknown)
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("annotation %s: %s", name, fmt.Sprintf(format, args...)))
	}
	get := func(name string) (string, bool) { return lookup(ing, name) }
	boolean := func(name string, into *bool) {
		if v, ok := get(name); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				bad(name, "%q is not true or false", v)
				return
			}
			*into = b
		}
	}
	boolean("ssl-redirect", &o.sslRedirect)
	boolean("force-ssl-redirect", &o.forceSSLRedirect)
	boolean("use-regex", &o.useRegex)
	boolean("canary", &o.canary)
	boolean("ssl-passthrough", &o.sslPassthrough)

	if v, ok := get("rewrite-target"); ok {
		if !route.ValidTemplate(v) {
			bad("rewrite-target", "%q is not a path (nor one beginning with a group, $1)", v)
		}
		o.rewriteTarget = v
	}
	if v, ok := get("app-root"); ok {
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, " \t\r\n") {
			bad("app-root", "%q is not a path", v)
		}
		o.appRoot = v
	}
	for _, r := range []struct {
		name string
		code int
	}{{"permanent-redirect", 301}, {"temporal-redirect", 302}} {
		v, ok := get(r.name)
		if !ok || o.redirectURL != nil {
			continue // permanent-redirect first, as ingress-nginx
		}
		u, err := url.Parse(v)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			bad(r.name, "%q is not an http or https URL", v)
			continue
		}
		o.redirectURL, o.redirectCode = u, r.code
		if c, ok := get(r.name + "-code"); ok {
			n, err := strconv.Atoi(c)
			if err != nil || !slices.Contains([]int{301, 302, 303, 307, 308}, n) {
				bad(r.name+"-code", "%q is not 301, 302, 303, 307 or 308", c)
			}
			o.redirectCode = n
		}
	}
	if v, ok := get("backend-protocol"); ok {
		switch strings.ToUpper(v) {
		case "HTTP", "AUTO_HTTP":
		case "HTTPS":
			o.backendTLS = true
		case "GRPC":
			o.backendProtocol = config.ProtocolH2C
		case "GRPCS":
			o.backendTLS, o.backendProtocol = true, config.ProtocolH2
		default:
			bad("backend-protocol", "%q is not HTTP, HTTPS, GRPC or GRPCS", v)
		}
	}
	seconds := func(name string, into *time.Duration) {
		v, ok := get(name)
		if !ok {
			return
		}
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			*into = time.Duration(n) * time.Second // ingress-nginx's: a number of seconds
			return
		}
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			*into = d
			return
		}
		bad(name, "%q is not a number of seconds", v)
	}
	seconds("proxy-connect-timeout", &o.connectTimeout)
	seconds("proxy-read-timeout", &o.readTimeout)
	seconds("proxy-send-timeout", &o.sendTimeout)
	if v, ok := get("proxy-body-size"); ok {
		n, err := nginxSize(v)
		if err != nil {
			bad("proxy-body-size", "%v", err)
		}
		o.bodySize = n
	}
	if v, ok := get("upstream-vhost"); ok {
		if !validHostValue(v) {
			bad("upstream-vhost", "%q is not a host", v)
		}
		o.upstreamVhost = v
	}
	if v, ok := get("x-forwarded-prefix"); ok {
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "\r\n\x00") {
			bad("x-forwarded-prefix", "%q is not a path", v)
		}
		o.forwardedPrefix = v
	}
	ranges := func(name string) []netip.Prefix {
		v, ok := get(name)
		if !ok {
			return nil
		}
		var ps []netip.Prefix
		for _, f := range strings.Split(v, ",") {
			p, err := config.ParsePrefix(strings.TrimSpace(f))
			if err != nil {
				bad(name, "%q is not a CIDR or an IP address", strings.TrimSpace(f))
				continue
			}
			ps = append(ps, p)
		}
		return ps
	}
	allow := append(ranges("allowlist-source-range"), ranges("whitelist-source-range")...)
	if deny := ranges("denylist-source-range"); len(allow) > 0 || len(deny) > 0 {
		o.access = &route.Access{Allow: allow, Deny: deny}
	}
	intIn := func(name string, lo, hi int, into *int) {
		if v, ok := get(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				bad(name, "%q is not a whole number from %d to %d", v, lo, hi)
				return
			}
			*into = n
		}
	}
	// limit-rps, else limit-rpm, with bursts of limit-burst-multiplier
	// (default 5) times it, as ingress-nginx sets nginx's limit_req.
	rps, rpm, mult := 0, 0, 5
	intIn("limit-rps", 1, 1_000_000, &rps)
	intIn("limit-rpm", 1, 60_000_000, &rpm)
	intIn("limit-burst-multiplier", 1, 1000, &mult)
	switch {
	case rps > 0:
		o.limit = &route.RateLimit{Rate: float64(rps), Burst: rps * mult}
	case rpm > 0:
		o.limit = &route.RateLimit{Rate: float64(rpm) / 60, Burst: rpm * mult}
	}
	intIn("limit-connections", 1, 1_000_000, &o.conns)
	o.customHeaders, _ = get("custom-headers")
	enableCORS := false
	boolean("enable-cors", &enableCORS)
	if enableCORS {
		// ingress-nginx's defaults.
		c := &route.CORS{AllowOrigins: []string{"*"}, AllowMethods: "GET, PUT, POST, DELETE, PATCH, OPTIONS",
			AllowHeaders:     "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
			AllowCredentials: true, MaxAge: 1728000}
		if v, ok := get("cors-allow-origin"); ok {
			c.AllowOrigins = nil
			for _, o := range strings.Split(v, ",") {
				o = strings.TrimSpace(o)
				if o != "*" && !validOrigin(o) {
					bad("cors-allow-origin", "%q is not an origin (scheme://host[:port]) or *", o)
				}
				c.AllowOrigins = append(c.AllowOrigins, o)
			}
		}
		for _, f := range []struct {
			name string
			into *string
		}{{"cors-allow-methods", &c.AllowMethods}, {"cors-allow-headers", &c.AllowHeaders}, {"cors-expose-headers", &c.ExposeHeaders}} {
			if v, ok := get(f.name); ok {
				if strings.ContainsAny(v, "\r\n\x00") {
					bad(f.name, "%q holds a control character", v)
				}
				*f.into = strings.TrimSpace(v)
			}
		}
		boolean("cors-allow-credentials", &c.AllowCredentials)
		intIn("cors-max-age", 0, 1<<31-1, &c.MaxAge)
		o.cors = c
	}
	if v, ok := get("affinity"); ok {
		if v != "cookie" {
			bad("affinity", "%q: only cookie", v)
		}
		o.affinityCookie = "INGRESSCOOKIE" // ingress-nginx's default name
		if n, ok := get("session-cookie-name"); ok {
			if !h1.IsToken(n) {
				bad("session-cookie-name", "%q is not a cookie name", n)
			}
			o.affinityCookie = n
		}
		if p, ok := get("session-cookie-path"); ok {
			if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "; \t\r\n") {
				bad("session-cookie-path", "%q is not a path", p)
			}
			o.cookiePath = p
		}
		// -max-age, else -expires (its legacy form): seconds.
		seconds("session-cookie-expires", &o.cookieMaxAge)
		seconds("session-cookie-max-age", &o.cookieMaxAge)
		if v, ok := get("session-cookie-samesite"); ok {
			switch strings.ToLower(v) {
			case "lax", "strict", "none":
				o.cookieSameSite = strings.ToUpper(v[:1]) + strings.ToLower(v[1:])
			default:
				bad("session-cookie-samesite", "%q is not Lax, Strict or None", v)
			}
		}
	}
	if v, ok := get("upstream-hash-by"); ok {
		h, ok := strings.CutPrefix(v, "$http_")
		if !ok || !h1.IsToken(h) {
			unknown = append(unknown, "upstream-hash-by "+v+" (only $http_<header> is served)")
		} else {
			o.hashHeader = strings.ReplaceAll(h, "_", "-")
		}
	}
	intIn("canary-weight-total", 1, 1_000_000, &o.canaryTotal)
	intIn("canary-weight", 0, o.canaryTotal, &o.canaryWeight)
	if v, ok := get("canary-by-header"); ok {
		if !h1.IsToken(v) {
			bad("canary-by-header", "%q is not a header name", v)
		}
		o.canaryHeader = v
	}
	if v, ok := get("canary-by-header-value"); ok {
		o.canaryHeaderValue = v
	}
	if v, ok := get("canary-by-header-pattern"); ok {
		if _, err := regexp.Compile("^(?:" + v + ")$"); err != nil {
			bad("canary-by-header-pattern", "%q is not a regular expression (RE2): %v", v, err)
		}
		o.canaryHeaderRegex = v
	}
	if v, ok := get("canary-by-cookie"); ok {
		if !h1.IsToken(v) {
			bad("canary-by-cookie", "%q is not a cookie name", v)
		}
		o.canaryCookie = v
	}
	if v, ok := get("auth-tls-secret"); ok {
		// "namespace/name", as ingress-nginx asks; only the Ingress's
		// own namespace, as custom-headers: an Ingress may not make
		// baton read another namespace's Secrets.
		ns, name, found := strings.Cut(v, "/")
		if !found {
			ns, name = ing.Namespace, v
		}
		switch {
		case ns != ing.Namespace:
			bad("auth-tls-secret", "%q is in another namespace: baton reads only the Ingress's own (%s)", v, ing.Namespace)
		case !validName(name):
			bad("auth-tls-secret", "%q is not namespace/name", v)
		default:
			o.authSecret, o.authVerify, o.authDepth = name, config.VerifyOn, 1
		}
	}
	if v, ok := get("auth-tls-verify-client"); ok {
		switch v {
		case config.VerifyOn, config.VerifyOptional, config.VerifyOptionalNoCA:
			o.authVerify = v
		case "off":
			o.authSecret = "" // no verification (nginx's ssl_verify_client off)
		default:
			bad("auth-tls-verify-client", "%q is not on, off, optional or optional_no_ca", v)
		}
	}
	intIn("auth-tls-verify-depth", 1, 100, &o.authDepth)
	boolean("auth-tls-pass-certificate-to-upstream", &o.authPass)
	if v, ok := get("auth-tls-match-cn"); ok {
		// ingress-nginx asks for "CN=..." and matches it, unanchored,
		// against nginx's $ssl_client_s_dn (RFC 2253, as baton's
		// ssl-client-subject-dn); RE2 here, not PCRE.
		if _, err := regexp.Compile(v); !strings.HasPrefix(v, "CN=") || err != nil {
			bad("auth-tls-match-cn", "%q is not a regular expression (RE2) that starts with CN=", v)
		}
		o.authCN = v
	}
	if v, ok := get("auth-tls-error-page"); ok {
		u, err := url.Parse(v)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			bad("auth-tls-error-page", "%q is not an http or https URL", v)
		} else {
			o.authPage = u.String()
		}
	}
	return o, unknown, errors.Join(errs...)
}

// validName reports whether s is a Kubernetes object name (RFC 1123
// subdomain).
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := range len(label) {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// lookup returns the value of ingress-nginx annotation name of ing,
// under either prefix (baton's first), and whether it is set.
func lookup(ing *networkingv1.Ingress, name string) (string, bool) {
	if v, ok := ing.Annotations[batonPrefix+name]; ok {
		return v, true
	}
	v, ok := ing.Annotations[nginxPrefix+name]
	return v, ok
}

// regex reports whether ing's paths are regular expressions: use-regex,
// or a rewrite-target (ingress-nginx makes them so).
func (o *options) regex() bool { return o.useRegex || o.rewriteTarget != "" }

// regexPath is an Ingress path as ingress-nginx matches it with use-regex
// (location ~* "^PATH"): case-insensitive, anchored at the start only.
func regexPath(p string) (string, error) {
	v := "(?i)" + p + ".*"
	if _, err := regexp.Compile(v); err != nil {
		return "", fmt.Errorf("path %q is not a regular expression: %w", p, err)
	}
	return v, nil
}

// nginxSize parses an nginx size ("8m", "1g", "512k", "100"); 0 is no
// limit.
func nginxSize(v string) (int64, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k':
			mult, s = 1<<10, s[:len(s)-1]
		case 'm':
			mult, s = 1<<20, s[:len(s)-1]
		case 'g':
			mult, s = 1<<30, s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (a number, with k, m or g)", v)
	}
	return n * mult, nil
}

// validOrigin reports whether o is a CORS origin: http or https, a host,
// perhaps a port, nothing else.
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Path == "" && u.RawQuery == "" && u.User == nil && validHostValue(u.Host)
}

func validHostValue(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}
