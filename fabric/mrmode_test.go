package fabric

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// selfExport opens a tcp fabric, lets force adjust its Info, exports a
// pattern-filled region of size bytes and returns a reader with its own
// server as peer rank 0.
func selfExport(t *testing.T, size int, force func(f *Fabric)) (*Fabric, *Export, *Reader, Peer, *Memory) {
	t.Helper()
	return selfExportWith(t, Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 5 * time.Second}, size, force)
}

// selfExportWith is selfExport on a fabric opened with o.
func selfExportWith(t *testing.T, o Options, size int, force func(f *Fabric)) (*Fabric, *Export, *Reader, Peer, *Memory) {
	t.Helper()
	f := openOrSkip(t, o)
	force(f)
	mem, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); mem.Free() })
	fillPattern(mem.Bytes())
	e, err := f.Export(mem.Bytes())
	if errors.Is(err, Errno(38)) { // FI_ENOSYS: fi_mr_bind unsupported
		t.Skipf("%s cannot do what the forced mode needs: %v", f.Info().Provider, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.AddPeer(0, f.Address())
	if err != nil {
		t.Fatal(err)
	}
	return f, e, r, p, mem
}

// TestForcedProvKey: with FI_MR_PROV_KEY the export asks for no key and
// publishes the one the provider chose (fi_mr_key); readers use it.
func TestForcedProvKey(t *testing.T) {
	_, e, r, p, _ := selfExport(t, 1<<20, func(f *Fabric) { f.inf.MRProvKey = true })
	if e.Key() != 0 { // tcp hands back the requested key, and none was requested
		t.Fatalf("provider key %#x, want the provider's answer to a request for key 0", e.Key())
	}
	dst := make([]byte, 8192)
	if _, err := r.Read(ReadOp{Dst: dst, Peer: p, Addr: e.Base() + 65536, Key: e.Key()}); err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(dst, 65536); err != nil {
		t.Fatal(err)
	}
}

// TestForcedMREndpoint: with FI_MR_LOCAL and FI_MR_ENDPOINT forced, local
// registrations are bound to the reader's endpoint; off-heap destinations
// are registered once (0 registrations per later call), and nothing stays
// registered after Close. Where the provider cannot bind an MR to an
// endpoint (fi_mr_bind unsupported), the test says so.
func TestForcedMREndpoint(t *testing.T) {
	f, e, r, p, _ := selfExport(t, 1<<20, func(f *Fabric) { f.forceLocalMR = true; f.inf.MREndpoint = true })
	r.mrc.init(true, true)
	base := liveLocalMRs.Load()
	dst, err := Alloc(16 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	ops := make([]ReadOp, 16)
	for i := range ops {
		ops[i] = ReadOp{Dst: dst.Bytes()[i*4096 : (i+1)*4096], Peer: p, Addr: e.Base() + uint64(i*8192), Key: e.Key()}
	}
	tm, err := r.ReadBatch(ops)
	if err != nil {
		if strings.Contains(err.Error(), "Function not implemented") || strings.Contains(err.Error(), "not supported") {
			t.Skipf("%s cannot bind an MR to an endpoint: %v", f.Info().Provider, err)
		}
		t.Fatal(err)
	}
	if tm.Regs != 1 {
		t.Fatalf("first call: %d registrations, want 1", tm.Regs)
	}
	for k := 0; k < 3; k++ {
		if tm, err = r.ReadBatch(ops); err != nil || tm.Regs != 0 {
			t.Fatalf("call %d: %d registrations (want 0), err %v", k+2, tm.Regs, err)
		}
	}
	for i, op := range ops {
		if err := checkPattern(op.Dst, uint64(i*8192)); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	if live := liveLocalMRs.Load() - base; live != 0 {
		t.Fatalf("%d endpoint-bound registrations left after Close", live)
	}
}

// TestSharedDomain: at FI_THREAD_SAFE readers share the process's one
// domain, each with its own endpoint and CQ; shm and tcp readers get
// domains of their own (guarded, tcpDoms).
func TestSharedDomain(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			f := openOrSkip(t, pc.opts)
			if f.guarded || f.tcpDoms { // shm: an abandoned call's locks stay in its quarantine; tcp: see tcpDoms
				if !f.Info().ReaderDomains {
					t.Fatalf("%s: readers share the domain", f.Info().Provider)
				}
				return
			}
			if f.Info().ReaderDomains {
				t.Fatalf("%s (%s): readers open their own domains", f.Info().Provider, f.Info().Threading)
			}
			r1, err := f.NewReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r1.Close()
			r2, err := f.NewReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r2.Close()
			if r1.dom != f.dom || r2.dom != f.dom || r1.c.ep == r2.c.ep || r1.c.cq == r2.c.cq {
				t.Fatal("readers do not share the domain with their own endpoint and CQ")
			}
		})
	}
}
