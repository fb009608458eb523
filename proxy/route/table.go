package route

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Table is a compiled set of rules, for every listener. It is immutable:
// Match may run from any number of goroutines.
type Table[B any] struct {
	listeners map[string]*hostTable[B]
}

// hostTable is one listener's rules by host. A request's host picks the
// most specific group that has a rule for it: its exact host, then the
// longest wildcard that covers it, then the rules without a host (the
// Gateway API's precedence of hostnames). Within a group the entries are
// in precedence order.
type hostTable[B any] struct {
	exact     map[string]*group[B]
	wildcards []wildcard[B] // longest suffix first
	any       *group[B]
}

type wildcard[B any] struct {
	suffix   string // ".example.com" for "*.example.com"
	oneLabel bool   // it takes hosts of one label more only (Rule.OneLabel)
	group    *group[B]
}

// group is the entries of one host, in precedence order, indexed by the
// leading segments of the paths they can take (a trie of segments): a
// request is tried only against the entries whose fixed segments its path
// begins with, and those that fix none (a regular expression, the prefix
// "/"), in precedence order. A thousand routes on a host cost a request no
// more than the few on its way down the trie.
type group[B any] struct {
	from    []*Prepared[B] // the rules it was built from, in order (Build)
	entries []*entry[B]    // in precedence order; an entry's rank is its index
	root    node[B]
	rest    []*entry[B] // the entries that fix no segment, in order
}

// node is a trie node: the entries whose fixed segments end here, in
// order, and the next segments.
type node[B any] struct {
	entries  []*entry[B]
	children map[string]*node[B]
}

// maxDepth bounds the segments the trie indexes: an entry that fixes more
// is kept at this depth (its match still checks the whole path).
const maxDepth = 8

// index sorts the entries and builds the trie.
func (g *group[B]) index() {
	sortEntries(g.entries)
	g.root, g.rest = node[B]{}, nil
	for i, e := range g.entries {
		e.rank = i // one entry is in one group only (Build copies them per host)
		segs := e.segments()
		if len(segs) == 0 {
			g.rest = append(g.rest, e)
			continue
		}
		n := &g.root
		for _, seg := range segs {
			if n.children == nil {
				n.children = make(map[string]*node[B])
			}
			c := n.children[seg]
			if c == nil {
				c = &node[B]{}
				n.children[seg] = c
			}
			n = c
		}
		n.entries = append(n.entries, e)
	}
}

// segments are the leading segments of every path e takes (at most
// maxDepth): none when its path match fixes none.
func (e *entry[B]) segments() []string {
	v := e.path.Value
	switch e.path.Type {
	case PathPrefix, PathExact:
		if v == "/" {
			if e.path.Type == PathExact {
				return []string{""} // "/" alone: its first segment is empty
			}
			return nil
		}
	case PathStringPrefix:
		// "/api/v" takes "/api/v1": only the segments before the last
		// '/' are fixed.
		i := strings.LastIndexByte(v, '/')
		if i <= 0 {
			return nil
		}
		v = v[:i]
	default:
		return nil
	}
	segs := strings.Split(strings.TrimPrefix(v, "/"), "/")
	return segs[:min(len(segs), maxDepth)]
}

// entry is one match of one rule, compiled.
type entry[B any] struct {
	rule   *Compiled[B]
	path   PathMatch
	bpath  []byte // the value, for paths parsed in place
	re     *regexp.Regexp
	method []byte
	header []compiledValue
	query  []compiledValue
	match  int // its place among the rule's matches
	rank   int // its place in its group's precedence order
}

// Compiled is a rule ready for requests: what Match returns.
type Compiled[B any] struct {
	Rule[B]
	// RequestEdit and ResponseEdit are the header filters, compiled; nil
	// when the rule has none.
	RequestEdit, ResponseEdit *HeaderEdit
	// RewriteHost is the URL rewrite's host, nil when it keeps the
	// request's.
	RewriteHost []byte
	pathRE      map[string]*regexp.Regexp // its PathRegex matches' by value
	limit       *limiter                  // its RateLimit's buckets; nil: none
	conns       *connLimiter              // its MaxConnections' counts; nil: none
	total       int                       // the backends' total weight
	cumulate    []int                     // running sums of the weights
}

// PathRegexp returns the compiled regular expression of c's PathRegex
// match of value, or nil.
func (c *Compiled[B]) PathRegexp(value string) *regexp.Regexp { return c.pathRE[value] }

// Compile compiles rules into a Table. A rule that cannot be compiled (a
// regular expression that does not parse) is left out, and named in the
// error; the others are in the Table all the same.
func Compile[B any](rules []Rule[B]) (*Table[B], error) {
	ps := make([]*Prepared[B], 0, len(rules))
	var errs []error
	for i := range rules {
		p, err := Prepare(&rules[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ps = append(ps, p)
	}
	t := Build(ps, nil)
	if len(errs) > 0 {
		return t, fmt.Errorf("route: %w", errors.Join(errs...))
	}
	return t, nil
}

// Prepared is one rule compiled (its regular expressions, header edits and
// weights), ready to be put in a Table by Build. It is immutable: one
// Prepared may be in any number of Tables, old and new, so that a change
// of one rule of a thousand compiles that rule only.
type Prepared[B any] struct {
	c       *Compiled[B]
	entries []*entry[B] // Build copies them: an entry's rank is its table's
}

// Prepare compiles one rule; the error names it.
func Prepare[B any](r *Rule[B]) (*Prepared[B], error) {
	c, entries, err := compileRule(r)
	if err != nil {
		return nil, err
	}
	return &Prepared[B]{c: c, entries: entries}, nil
}

// Rule is the rule p was prepared from.
func (p *Prepared[B]) Rule() *Rule[B] { return &p.c.Rule }

// Build puts prepared rules in a new Table: by listener and host, each
// host's in precedence order. A host whose rules are the same Prepared
// ones, in the same order, as in prev (nil: none) keeps prev's group: a
// change of one host's routes among a thousand hosts indexes that host's
// again, not the thousand.
func Build[B any](ps []*Prepared[B], prev *Table[B]) *Table[B] {
	t := &Table[B]{listeners: make(map[string]*hostTable[B])}
	var seen map[string]bool
	for _, p := range ps {
		c := p.c
		ht := t.listeners[c.Listener]
		if ht == nil {
			hint := 0
			if prev != nil && prev.listeners[c.Listener] != nil {
				hint = len(prev.listeners[c.Listener].exact)
			}
			ht = &hostTable[B]{exact: make(map[string]*group[B], hint), any: &group[B]{}}
			t.listeners[c.Listener] = ht
		}
		hosts := c.Hostnames
		if len(hosts) == 0 {
			hosts = []string{""}
		}
		clear(seen)
		for _, h := range hosts {
			h = normalizeHost(h)
			if len(hosts) > 1 {
				if seen == nil {
					seen = make(map[string]bool)
				}
				if seen[h] {
					continue
				}
				seen[h] = true
			}
			switch {
			case h == "":
				ht.any.from = append(ht.any.from, p)
			case strings.HasPrefix(h, "*."):
				g := ht.wildcardGroup(h[1:], c.OneLabel, true)
				g.from = append(g.from, p)
			default:
				g := ht.exact[h]
				if g == nil {
					g = &group[B]{}
					ht.exact[h] = g
				}
				g.from = append(g.from, p)
			}
		}
	}
	for name, ht := range t.listeners {
		var old *hostTable[B]
		if prev != nil {
			old = prev.listeners[name]
		}
		for h, g := range ht.exact {
			var was *group[B]
			if old != nil {
				was = old.exact[h]
			}
			ht.exact[h] = g.build(was)
		}
		for i, w := range ht.wildcards {
			var was *group[B]
			if old != nil {
				was = old.wildcardGroup(w.suffix, w.oneLabel, false)
			}
			ht.wildcards[i].group = w.group.build(was)
		}
		slices.SortStableFunc(ht.wildcards, func(a, b wildcard[B]) int { return len(b.suffix) - len(a.suffix) })
		var was *group[B]
		if old != nil {
			was = old.any
		}
		ht.any = ht.any.build(was)
	}
	return t
}

// build returns prev when it was built from the same rules as g, or else
// g with its entries copied from its rules and indexed. A built group is
// not changed again: tables old and new may share it.
func (g *group[B]) build(prev *group[B]) *group[B] {
	if prev != nil && slices.Equal(prev.from, g.from) {
		return prev
	}
	n := 0
	for _, p := range g.from {
		n += len(p.entries)
	}
	vals := make([]entry[B], 0, n)
	for _, p := range g.from {
		for _, e := range p.entries {
			vals = append(vals, *e) // an entry has a rank in one group
		}
	}
	g.entries = make([]*entry[B], len(vals))
	for i := range vals {
		g.entries[i] = &vals[i]
	}
	g.index()
	return g
}

// wildcardGroup returns the group of the wildcard suffix (of one label
// only, or any); when there is none, a new one if create, or else nil.
func (ht *hostTable[B]) wildcardGroup(suffix string, oneLabel, create bool) *group[B] {
	for _, w := range ht.wildcards {
		if w.suffix == suffix && w.oneLabel == oneLabel {
			return w.group
		}
	}
	if !create {
		return nil
	}
	g := &group[B]{}
	ht.wildcards = append(ht.wildcards, wildcard[B]{suffix: suffix, oneLabel: oneLabel, group: g})
	return g
}

// compileRule compiles one rule and its matches.
func compileRule[B any](r *Rule[B]) (*Compiled[B], []*entry[B], error) {
	if err := checkFilters(&r.Filters); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", r.Name, err)
	}
	c := &Compiled[B]{Rule: *r, RequestEdit: newHeaderEdit(r.Filters.RequestHeaders), ResponseEdit: newHeaderEdit(r.Filters.ResponseHeaders)}
	if r.ClientCert != nil {
		c.RequestEdit = c.RequestEdit.dropping(ClientCertFields)
	}
	if rw := r.Filters.Rewrite; rw != nil && rw.Hostname != "" {
		c.RewriteHost = []byte(rw.Hostname)
	}
	if l := r.RateLimit; l != nil {
		if l.Rate <= 0 || l.Burst < 0 {
			return nil, nil, fmt.Errorf("%s: rate limit %v a second, burst %d", r.Name, l.Rate, l.Burst)
		}
		c.limit = newLimiter(l)
	}
	switch {
	case r.MaxConnections < 0:
		return nil, nil, fmt.Errorf("%s: max connections %d", r.Name, r.MaxConnections)
	case r.MaxConnections > 0:
		c.conns = &connLimiter{max: r.MaxConnections, n: make(map[netip.Addr]int)}
	}
	for _, b := range r.Backends {
		c.total += max(b.Weight, 0)
		c.cumulate = append(c.cumulate, c.total)
	}
	matches := r.Matches
	if len(matches) == 0 {
		matches = []Match{{Path: PathMatch{Type: PathPrefix, Value: "/"}}}
	}
	var entries []*entry[B]
	for i, m := range matches {
		e := &entry[B]{rule: c, path: m.Path, match: i}
		switch m.Path.Type {
		case PathPrefix:
			if v := strings.TrimSuffix(m.Path.Value, "/"); v != "" {
				e.path.Value = v
			} else {
				e.path.Value = "/"
			}
		case PathRegex:
			re, err := regexp.Compile("^(?:" + m.Path.Value + ")$")
			if err != nil {
				return nil, nil, fmt.Errorf("%s: path %q: %w", r.Name, m.Path.Value, err)
			}
			e.re = re
			if c.pathRE == nil {
				c.pathRE = make(map[string]*regexp.Regexp)
			}
			c.pathRE[m.Path.Value] = re
		}
		e.bpath = []byte(e.path.Value)
		if m.Method != "" {
			e.method = []byte(m.Method)
		}
		var err error
		if e.header, err = compileValues(m.Headers, true); err != nil {
			return nil, nil, fmt.Errorf("%s: header %w", r.Name, err)
		}
		if e.query, err = compileValues(m.Query, false); err != nil {
			return nil, nil, fmt.Errorf("%s: query parameter %w", r.Name, err)
		}
		entries = append(entries, e)
	}
	return c, entries, nil
}

// compileValues compiles the value matches of one Match. Only the first of
// several with the same name counts (the Gateway API's rule).
func compileValues(vs []ValueMatch, header bool) ([]compiledValue, error) {
	var out []compiledValue
	for _, v := range vs {
		name := v.Name
		if header {
			name = strings.ToLower(name)
		}
		if slices.ContainsFunc(out, func(c compiledValue) bool { return c.name == name }) {
			continue
		}
		c := compiledValue{name: name, value: []byte(v.Value)}
		if v.Regex {
			re, err := regexp.Compile("^(?:" + v.Value + ")$")
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", v.Name, v.Value, err)
			}
			c.re = re
		}
		out = append(out, c)
	}
	return out, nil
}

// sortEntries puts a host group's entries in precedence order (the
// Gateway API's, HTTPRouteRule.Matches): an Exact path first, then regular
// expressions (their place is the implementation's to choose: before the
// prefixes, longer first, as Envoy's), then the longest prefix; then a
// method match, more header matches, more query matches; then the older
// rule, the route first by name, the earlier rule and match.
func sortEntries[B any](es []*entry[B]) {
	slices.SortStableFunc(es, func(a, b *entry[B]) int {
		if c := cmp.Compare(pathRank(a.path.Type), pathRank(b.path.Type)); c != 0 {
			return c
		}
		if c := cmp.Compare(len(b.path.Value), len(a.path.Value)); c != 0 {
			return c
		}
		if c := boolCompare(len(a.method) > 0, len(b.method) > 0); c != 0 {
			return c
		}
		if c := cmp.Compare(len(b.header), len(a.header)); c != 0 {
			return c
		}
		if c := cmp.Compare(len(b.query), len(a.query)); c != 0 {
			return c
		}
		oa, ob := a.rule.Order, b.rule.Order
		if c := oa.Created.Compare(ob.Created); c != 0 {
			return c
		}
		if c := strings.Compare(oa.Route, ob.Route); c != 0 {
			return c
		}
		if c := cmp.Compare(oa.Index, ob.Index); c != 0 {
			return c
		}
		return cmp.Compare(a.match, b.match)
	})
}

// boolCompare orders true before false.
func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func pathRank(t PathType) int {
	switch t {
	case PathExact:
		return 0
	case PathRegex:
		return 1
	}
	return 2 // the prefixes, ordered by length together
}

// Request is what a rule is matched on. Host, Path and Method are as the
// request has them (the host with its port, if any; the normalised path
// without its query); Query is the raw query, with or without its '?'.
type Request struct {
	Host, Path, Method, Query []byte
	// Fields gives the request's header fields.
	Fields Fields
}

// Fields gives a request's header fields by name.
type Fields interface {
	// Field returns the value of the first field named name (given in
	// lower case), or nil when there is none.
	Field(name string) []byte
}

// Match returns the rule that takes req on listener, or nil when none
// does (a 404), and the path match that took it (for a filter that
// replaces the matched prefix).
func (t *Table[B]) Match(listener string, req *Request) (*Compiled[B], *PathMatch) {
	ht := t.listeners[listener]
	if ht == nil {
		return nil, nil
	}
	host := normalizeHostBytes(req.Host)
	var lower [256]byte
	if needsLower(host) {
		if len(host) > len(lower) {
			host = []byte(strings.ToLower(string(host)))
		} else {
			host = toLower(lower[:0], host)
		}
	}
	if g := ht.exact[string(host)]; g != nil {
		if e := g.first(req); e != nil {
			return e.rule, &e.path
		}
	}
	for _, w := range ht.wildcards {
		if n := len(host) - len(w.suffix); n > 0 && string(host[n:]) == w.suffix && (!w.oneLabel || indexByte(host[:n], '.') < 0) {
			if e := w.group.first(req); e != nil {
				return e.rule, &e.path
			}
		}
	}
	if e := ht.any.first(req); e != nil {
		return e.rule, &e.path
	}
	return nil, nil
}

// Has reports whether the table has a rule for listener.
func (t *Table[B]) Has(listener string) bool { return t.listeners[listener] != nil }

// first returns the first entry, in precedence order, that takes req: of
// those on the way down the trie along req's path, and the rest, merged by
// rank.
func (g *group[B]) first(req *Request) *entry[B] {
	var lists [maxDepth + 1][]*entry[B]
	k := 0
	if len(g.rest) > 0 {
		lists[k], k = g.rest, k+1
	}
	n := &g.root
	path := req.Path
	if len(path) > 0 && path[0] == '/' {
		path = path[1:]
	}
	for depth := 0; depth < maxDepth && n.children != nil; depth++ {
		seg := path
		if i := indexByte(path, '/'); i >= 0 {
			seg, path = path[:i], path[i+1:]
		} else {
			path = nil
		}
		c := n.children[string(seg)]
		if c == nil {
			break
		}
		if len(c.entries) > 0 {
			lists[k], k = c.entries, k+1
		}
		n = c
		if path == nil {
			break
		}
	}
	for {
		best := -1
		for i := range k {
			if len(lists[i]) > 0 && (best < 0 || lists[i][0].rank < lists[best][0].rank) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		e := lists[best][0]
		lists[best] = lists[best][1:]
		if e.matches(req) {
			return e
		}
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// Pick chooses one of the rule's backends, at random by weight. ok is
// false when the rule has no weight to share, or the backend picked is
// invalid: the request is then answered 500.
func (c *Compiled[B]) Pick() (b B, ok bool) {
	switch {
	case c.total == 0:
		return b, false
	case len(c.Backends) == 1:
		return c.Backends[0].Target, !c.Backends[0].Invalid
	}
	n := rand.IntN(c.total)
	i, _ := slices.BinarySearch(c.cumulate, n+1)
	be := &c.Backends[i]
	return be.Target, !be.Invalid
}

// normalizeHost lowers a configured hostname and strips a trailing dot.
func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// RequestHost is a request's host as rules take it: without its port or
// trailing dot (its case as it came).
func RequestHost(h []byte) []byte { return normalizeHostBytes(h) }

// normalizeHostBytes strips a request host's port and trailing dot.
func normalizeHostBytes(h []byte) []byte {
	if i := lastByte(h, ':'); i >= 0 && (len(h) == 0 || h[len(h)-1] != ']') {
		h = h[:i]
	}
	if len(h) > 0 && h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	return h
}

func lastByte(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

func needsLower(h []byte) bool {
	for _, c := range h {
		if 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

func toLower(dst, h []byte) []byte {
	for _, c := range h {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}
