package fabric

// ProbeDevice is the GPUDirect probe: it reports whether this reader could
// read straight into GPU memory. The provider must offer FI_HMEM when asked
// for it explicitly (the capability is never reported otherwise), and a
// registration of the n bytes of device memory at addr (runtime "cuda" or
// "hip", device index device) for local use must succeed. Capabilities are
// not enough: Debian's shm advertises FI_HMEM although its libfabric was
// built without CUDA, so the registration decides. Nothing stays
// registered. nil means both steps succeeded; the error names the step
// that failed and the provider's code.
func (r *Reader) ProbeDevice(addr uint64, n int, runtime string, device int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errClosedReader
	}
	var iface cInt
	switch runtime {
	case "cuda":
		iface = fiHmemCuda
	case "hip":
		iface = fiHmemRocr
	default:
		return invalid("probe device memory", nil, "runtime %q: want cuda or hip", runtime)
	}
	if addr == 0 || n <= 0 {
		return invalid("probe device memory", nil, "device range %#x + %d bytes", addr, n)
	}
	if err := r.ensureEndpoint(); err != nil {
		return err
	}
	bind := cInt(0)
	if r.f.inf.MREndpoint {
		bind = 1
	}
	var stage cInt
	rc := ddHmemProbe(r.f.info, r.dom, r.c.ep, bind, cUint64T(addr), cSizeT(n), iface, cInt(device), &stage)
	if rc == 0 {
		return nil
	}
	step := map[cInt]string{1: "fi_getinfo with FI_HMEM", 2: "fi_mr_regattr of device memory", 3: "fi_mr_bind of device memory"}[stage]
	return localErr(step, int(rc), "provider %s, domain %s, %s device %d", r.f.inf.Provider, r.f.inf.Domain, runtime, device)
}
