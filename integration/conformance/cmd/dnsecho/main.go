// Command dnsecho stands in for the CoreDNS pod of the conformance suite's
// base manifests, which only its UDPRoute tests use (baton does not claim
// them): it serves DNS on :53 over UDP and TCP and answers every A
// question with the asker's address, as CoreDNS's whoami plugin does.
package main

import (
	"log"
	"net"

	"github.com/miekg/dns"
)

func main() {
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, question := range q.Question {
			if question.Qtype != dns.TypeA {
				continue
			}
			var ip net.IP
			switch a := w.RemoteAddr().(type) {
			case *net.UDPAddr:
				ip = a.IP
			case *net.TCPAddr:
				ip = a.IP
			}
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: ip})
		}
		w.WriteMsg(m)
	})
	errs := make(chan error, 2)
	for _, network := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: ":53", Net: network, Handler: handler}
		go func() { errs <- srv.ListenAndServe() }()
	}
	log.Fatal(<-errs)
}
