package fabric

import (
	"strings"
	"testing"
)

// Providers lists tcp;ofi_rxm on lo and shm with their MR modes, and Select
// picks what Open opens, saying why.
func TestProvidersAndSelect(t *testing.T) {
	offers, err := Providers()
	if err != nil {
		skipOrRequire(t, "no providers: %v", err)
	}
	var tcpLo, shm *Offer
	for i := range offers {
		o := &offers[i]
		switch {
		case o.Provider == "tcp;ofi_rxm" && o.Domain == "lo":
			tcpLo = o
		case o.Provider == "shm":
			shm = o
		}
	}
	if tcpLo == nil || shm == nil {
		skipOrRequire(t, "tcp;ofi_rxm on lo or shm missing from %+v", offers)
	}
	if !tcpLo.SoftwareRMA || shm.SoftwareRMA || !shm.MRVirtAddr || tcpLo.MRVirtAddr || tcpLo.TxSize <= 0 || tcpLo.MaxMsgSize == 0 {
		t.Errorf("tcp %+v\nshm %+v", *tcpLo, *shm)
	}
	for _, o := range []Options{{}, {Provider: "shm"}, {Provider: "tcp", Domain: "lo"}} {
		inf, why, err := Select(o)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		got := f.Info()
		f.Close()
		if inf.Provider != got.Provider || inf.Domain != got.Domain {
			t.Errorf("%+v: Select %s/%s, Open %s/%s", o, inf.Provider, inf.Domain, got.Provider, got.Domain)
		}
		if !strings.Contains(why, inf.Domain) || (o.Provider == "") != strings.Contains(why, "default order") {
			t.Errorf("%+v: why %q", o, why)
		}
	}
	if _, _, err := Select(Options{Provider: "nosuch"}); err == nil || !strings.Contains(err.Error(), "available") {
		t.Errorf("Select(nosuch) = %v", err)
	}
}
