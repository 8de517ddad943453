package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckLoopback: a loopback fabric address offered across hosts is an
// Open error naming both ranks, both hosts, the interface and the key;
// loopback between ranks of one machine is fine.
func TestCheckLoopback(t *testing.T) {
	peers := []peerInfo{
		{Host: "n1", BootID: "a"}, {Host: "n1", BootID: "a"},
		{Host: "n2", BootID: "b"}, {Host: "n2", BootID: "b"},
	}
	all := func(r int) []int { return []int{0, 1, 2, 3} }
	lo, eth := fabricIface{Name: "lo", Loopback: true}, fabricIface{Name: "eth0"}
	if err := checkLoopback(peers, []fabricIface{eth, eth, eth, eth}, all); err != nil {
		t.Fatalf("all on eth0: %v", err)
	}
	// Loopback on one machine only reaches that machine's ranks.
	if err := checkLoopback(peers[:2], []fabricIface{lo, lo}, func(int) []int { return []int{0, 1} }); err != nil {
		t.Fatalf("one machine on lo: %v", err)
	}
	err := checkLoopback(peers, []fabricIface{eth, eth, lo, eth}, all)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("rank 2 on lo: %v", err)
	}
	for _, want := range []string{"rank 2 on n2", `"lo"`, "rank 0 on n1", "FABRIC_IFACE", "fabric.iface"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// Only pairs that read each other through the fabric count.
	none := func(r int) []int { return nil }
	if err := checkLoopback(peers, []fabricIface{eth, eth, lo, eth}, none); err != nil {
		t.Fatalf("no fabric pairs: %v", err)
	}
}
