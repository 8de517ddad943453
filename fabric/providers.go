package fabric

// What this libfabric offers, without opening anything: every provider and
// domain that can carry our reads, and the one Open would pick. For
// diagnostics (engine/doctor); Open itself uses selectInfo directly.

import (
	"fmt"
	"strings"

	"github.com/ddstore/ddstore/fault"
)

// Offer is one provider/domain that fi_getinfo offers for FI_EP_RDM
// endpoints with FI_RMA reads and the MR modes this package handles.
type Offer struct {
	Info      // as Open would see it (Window, AVCount and the like stay zero)
	HMEM bool // FI_HMEM offered when asked for (device memory may be registered)
}

// DefaultOrder is the provider preference of Open when Options.Provider is
// empty.
func DefaultOrder() []string { return append([]string(nil), defaultOrder...) }

// Providers lists what this libfabric offers, one entry per provider and
// domain at the strongest threading level it grants, in fi_getinfo's order.
// The error is fault.ErrNoLibrary, or fault.ErrNoProvider when nothing is offered.
func Providers() ([]Offer, error) {
	if err := loadLibrary(); err != nil {
		return nil, err
	}
	var out []Offer
	seen := map[string]bool{}
	var lastErr error
	for _, lvl := range threadingLevels {
		var list *cStructFiInfo
		if rc := ddGetinfo(&list, lvl); rc != 0 {
			lastErr = fiErr("fi_getinfo", rc)
			continue
		}
		for i := list; i != nil; i = ddInfoNext(i) {
			inf := describe(i)
			k := inf.Provider + "\x00" + inf.Domain
			if seen[k] {
				continue
			}
			seen[k] = true
			inf.SoftwareRMA = softwareRMA(inf.Provider)
			out = append(out, Offer{Info: inf, HMEM: ddHmemOffered(i) == 0})
		}
		ddFreeinfo(list)
	}
	if len(out) == 0 {
		return nil, &fault.Error{Op: "fi_getinfo", Side: fault.Local, Kind: fault.ErrNoProvider, Detail: "no provider offers FI_EP_RDM with FI_RMA reads", Err: lastErr}
	}
	return out, nil
}

// Select is the provider and domain Open would pick for o (the same
// selection code), without opening them, and why in words: asked for, or
// the first of DefaultOrder offered (naming the ones before it that are
// not), on the domain asked for or the provider's first.
func Select(o Options) (Info, string, error) {
	if err := loadLibrary(); err != nil {
		return Info{}, "", err
	}
	info, err := selectInfo(o)
	if err != nil {
		return Info{}, "", err
	}
	inf := describe(info)
	ddFreeinfo(info)
	inf.SoftwareRMA = softwareRMA(inf.Provider)
	return inf, selectWhy(o, inf.Provider, inf.Domain), nil
}

// selectWhy explains a selection of provider prov, domain dom for o.
func selectWhy(o Options, prov, dom string) string {
	var why string
	if o.Provider != "" {
		why = fmt.Sprintf("provider %q asked for", o.Provider)
	} else {
		var missing []string
		for _, w := range defaultOrder {
			if prov == w || prov == w+";ofi_rxm" {
				break
			}
			missing = append(missing, w)
		}
		why = "first of the default order " + strings.Join(defaultOrder, ", ") + " offered"
		if len(missing) > 0 {
			why += " (" + strings.Join(missing, ", ") + " not offered)"
		}
	}
	if o.Domain != "" {
		return why + fmt.Sprintf(", domain %q asked for", o.Domain)
	}
	return why + fmt.Sprintf(", its first domain %q", dom)
}

// EagerLimit is FI_OFI_RXM_EAGER_LIMIT as libfabric sees it in this
// process (dd_load sets it to the package's value unless it was set):
// ranks that disagree on it speak different rxm protocols for the same
// message sizes. "" before libfabric is loaded.
func EagerLimit() string {
	have, _ := rxmEagerLimit()
	return have
}
