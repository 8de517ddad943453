package engine

import (
	"encoding/binary"
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
	if o.Fabric.Domain != "" || !softwareIfaceProvider(o.Fabric.Provider) {
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

// maxRecordErr bounds the error text a rank publishes in round 2.
const maxRecordErr = 4 << 10

// encodeAddrRecord is a rank's round-2 record: its fabric address, the
// interface that address is on, and why its local setup failed (nil: it
// did not). Drawn:
//
//	0   flags    u8   bit 0: the interface is a loopback
//	1   nameLen  u8   interface name
//	2   errLen   u16  little-endian
//	4   name, then err, then the address to the end
func encodeAddrRecord(addr []byte, iface fabricIface, failed error) []byte {
	name := iface.Name[:min(len(iface.Name), 255)]
	var why string
	if failed != nil {
		why = failed.Error()
		why = why[:min(len(why), maxRecordErr)]
	}
	b := make([]byte, 4, 4+len(name)+len(why)+len(addr))
	if iface.Loopback {
		b[0] = 1
	}
	b[1] = byte(len(name))
	binary.LittleEndian.PutUint16(b[2:], uint16(len(why)))
	b = append(append(append(b, name...), why...), addr...)
	return b
}

// decodeAddrRecord reads a record of encodeAddrRecord. The address is a
// view into b (under tree, into the node's one table), nil when empty.
func decodeAddrRecord(b []byte) (addr []byte, iface fabricIface, failed string, err error) {
	if len(b) < 4 || b[0] > 1 {
		return nil, iface, "", fmt.Errorf("record of %d bytes: no header", len(b))
	}
	nName, nWhy := int(b[1]), int(binary.LittleEndian.Uint16(b[2:]))
	if nWhy > maxRecordErr {
		return nil, iface, "", fmt.Errorf("record with an error text of %d bytes (limit %d)", nWhy, maxRecordErr)
	}
	if 4+nName+nWhy > len(b) {
		return nil, iface, "", fmt.Errorf("record of %d bytes: truncated (interface %d, error %d bytes)", len(b), nName, nWhy)
	}
	iface = fabricIface{Name: string(b[4 : 4+nName]), Loopback: b[0] == 1}
	failed = string(b[4+nName : 4+nName+nWhy])
	if rest := b[4+nName+nWhy:]; len(rest) > 0 {
		addr = rest[:len(rest):len(rest)]
	}
	return addr, iface, failed, nil
}
