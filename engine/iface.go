package engine

import (
	"fmt"
	"net"
	"strings"

	"github.com/ddstore/ddstore/engine/mesh"
	"github.com/ddstore/ddstore/fault"
)

// fabricIface is what a rank says about the interface its fabric address
// is on (round 2 of Open).
type fabricIface struct {
	Name     string `json:"iface,omitempty"` // libfabric domain: the interface name for tcp
	Loopback bool   `json:"loopback,omitempty"`
}

// ifaceOf describes domain (an interface name for the tcp and sockets
// providers; other providers' domains are not interfaces and are never
// loopback).
func ifaceOf(domain string) fabricIface {
	ifc, err := net.InterfaceByName(domain)
	if err != nil {
		return fabricIface{Name: domain}
	}
	return fabricIface{Name: domain, Loopback: ifc.Flags&net.FlagLoopback != 0}
}

// chooseIface picks the fabric interface when none is configured and a
// rank of fabricPeers runs on another machine: the interface that carries
// this rank's own connection to that rank (the path the rendezvous and the
// store's collectives already take). "" when nothing needs choosing.
func (s *Store) chooseIface(fabricPeers []int) string {
	o := &s.opts
	if o.Fabric.Domain != "" || s.cp == nil || !softwareIfaceProvider(o.Fabric.Provider) {
		return ""
	}
	for _, r := range fabricPeers {
		if s.peers[r].sameMachine {
			continue
		}
		if ip := s.localIP(r); ip != nil {
			if name, lo := mesh.InterfaceOf(ip); name != "" && !lo {
				return name
			}
		}
	}
	return ""
}

// softwareIfaceProvider: providers whose domains are network interfaces.
func softwareIfaceProvider(p string) bool {
	p = strings.ToLower(p)
	return p == "" || strings.HasPrefix(p, "tcp") || strings.HasPrefix(p, "sockets") || strings.HasPrefix(p, "udp")
}

// checkLoopback fails when a rank offers a fabric address on a loopback
// interface to a rank of fabricPeers (by rank: which peers each rank reads
// through the fabric) on another machine. Every rank runs it on the same
// records, so every rank fails alike, at Open, naming both ranks, both
// hosts, the interface and the key that sets it.
func checkLoopback(peers []peerInfo, ifaces []fabricIface, fabricPeers func(r int) []int) error {
	for r := range peers {
		for _, q := range fabricPeers(r) {
			if q == r || sameMachine(peers[r], peers[q]) {
				continue
			}
			for _, pair := range [][2]int{{q, r}, {r, q}} {
				off, to := pair[0], pair[1]
				if off < len(ifaces) && ifaces[off].Loopback {
					return &fault.Error{Op: "Open", Ranks: []int{off, to}, Side: fault.Local, Kind: fault.ErrInvalid,
						Detail: fmt.Sprintf("rank %d on %s offers a fabric address on the loopback interface %q to rank %d on %s, "+
							"which cannot reach it: set fabric.iface (env FABRIC_IFACE) to an interface that reaches other hosts, "+
							"or leave it empty to use the one that carries the ranks' own connections",
							off, peers[off].Host, ifaces[off].Name, to, peers[to].Host)}
				}
			}
		}
	}
	return nil
}

func sameMachine(a, b peerInfo) bool { return a.Host == b.Host && a.BootID == b.BootID }

// localIP is this rank's address on the path to rank r: the local end of
// the mesh's connection to it, or (tree, where most ranks hold no
// connection to r) the source address the kernel routes to r's first
// published address with; nil when unknown.
func (s *Store) localIP(r int) net.IP {
	if s.mesh != nil {
		return s.mesh.LocalIP(r)
	}
	if len(s.peers[r].CtrlIPs) == 0 {
		return nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(s.peers[r].CtrlIPs[0], "9")) // connect only: nothing is sent
	if err != nil {
		return nil
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP
	}
	return nil
}
