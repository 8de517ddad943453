package mesh

// This host's side of the mesh: its addresses and interfaces, and the
// open-file limit a full mesh needs.

import (
	"net"

	"golang.org/x/sys/unix"
)

// LocalIPs lists the addresses of this machine's up interfaces:
// non-loopback IPv4, then non-loopback global IPv6, then loopback.
func LocalIPs() []string {
	var v4, v6, lo []string
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip := ipn.IP
			switch {
			case ip.IsLoopback():
				lo = append(lo, ip.String())
			case ip.To4() != nil:
				v4 = append(v4, ip.String())
			case ip.IsGlobalUnicast():
				v6 = append(v6, ip.String())
			}
		}
	}
	if len(lo) == 0 {
		lo = []string{"127.0.0.1"}
	}
	return append(append(v4, v6...), lo...)
}

// LocalIP is this rank's address on its connection to rank (the path the
// store's traffic to that rank takes), nil when there is none.
func (m *Mesh) LocalIP(rank int) net.IP {
	if rank < 0 || rank >= len(m.peers) || m.peers[rank] == nil {
		return nil
	}
	if a, ok := m.peers[rank].conn.LocalAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

// InterfaceOf names the up interface that holds ip, and whether it is a
// loopback interface; "" when none does.
func InterfaceOf(ip net.IP) (name string, loopback bool) {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
				return ifc.Name, ifc.Flags&net.FlagLoopback != 0
			}
		}
	}
	return "", ip.IsLoopback()
}

// raiseNoFile lifts the soft limit on open files towards need (bounded by
// the hard limit): a full mesh holds world−1 sockets, beside the
// fabric's and the launcher's own.
func raiseNoFile(need int) {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) != nil || l.Cur >= uint64(need) {
		return
	}
	l.Cur = min(uint64(need), l.Max)
	unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
}
