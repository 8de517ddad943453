package fabric

import (
	"errors"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// TestOtherProviders runs the core of the suite over the software providers
// that the machines' libfabric also offers for FI_EP_RDM with FI_RMA reads:
// sockets and udp;ofi_rxd, on lo. Each read is checked against the target's
// pattern. Where a provider is missing, or lacks what a step needs, the
// test says so (skip with fi_getinfo's or the provider's reason).
func TestOtherProviders(t *testing.T) {
	for _, pc := range []provCase{
		{"sockets", Options{Provider: "sockets", Domain: "lo"}},
		{"udp", Options{Provider: "udp;ofi_rxd", Domain: "lo"}},
	} {
		t.Run(pc.name, func(t *testing.T) {
			o := pc.opts
			o.Timeout = 10 * time.Second
			f, err := Open(o)
			if err != nil {
				if isNoProvider(err) {
					t.Skipf("%s not usable here: %v", pc.opts.Provider, err)
				}
				t.Fatal(err)
			}
			defer f.Close()
			in := f.Info()
			t.Logf("%s: threading %s, mr_mode local=%v virt=%v provkey=%v, progress manual=%v, tx %d, wait fd %v",
				in.Provider, in.Threading, in.MRLocal, in.MRVirtAddr, in.MRProvKey, in.ManualProgress, in.TxSize, in.WaitFD)
			r, tgs, peers := readerWith(t, f, o, 4<<20, false, 3)
			tg, p := tgs[0], peers[0]
			const row, n = 4096, 64
			dst := make([]byte, row*n)
			mk := func() []ReadOp {
				ops := make([]ReadOp, n)
				for i := range ops {
					ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64((i*13)%(tg.size/row))*row, Key: tg.key}
				}
				return ops
			}
			readChecked(t, "batch", r.ReadBatch, mk(), tgs, peers)
			readChecked(t, "single", r.ReadBatch, mk()[:1], tgs, peers)
			if in.SoftwareRMA {
				readChecked(t, "gather", r.ReadGather, mk(), tgs, peers)
				if r.GatheredOps() == 0 {
					t.Fatal("gather served no op")
				}
			}
			r.SetTimeout(time.Second) // udp;ofi_rxd drops a refused read: only the deadline ends it
			_, err = r.Read(ReadOp{Dst: dst[:row], Peer: p, Addr: tg.base, Key: tg.key + 777})
			r.SetTimeout(0)
			if err == nil {
				t.Logf("%s does not check remote keys: a read with a wrong key succeeded", in.Provider)
			} else if fault.RankOf(err) != 3 || errors.Is(err, fault.ErrInvalid) {
				t.Fatalf("refused read: %v", err)
			} else {
				t.Logf("refused read: %v", err)
			}
			readChecked(t, "after the refused read", r.ReadBatch, mk(), tgs, peers)
		})
	}
}
