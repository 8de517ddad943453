# A lent GPU machine (no Go, no libfabric there): make device-bundle builds
# everything examples/device/run.sh needs into bin/device and packs it as
# bin/device.tgz, small enough to travel with the working tree: the test
# binaries, bin/doctor, ddrun, ddtop, opentime, the hot-path set of
# examples/bench/hotpath.sh (ddtop-base, telemetry-v1.test, cpuof), and
# libfabric.so.1 with the libraries it loads. On that machine:
#   tar -C /tmp/b -xzf bin/device.tgz && bash examples/device/run.sh /tmp/b/device OUTDIR [STEP...]
.PHONY: device-bundle
DEVICE_LDFLAGS := -ldflags=-s\ -w
device-bundle: deps
	rm -rf $(BIN)/device && mkdir -p $(BIN)/device/lib
	bash examples/bench/hotpath.sh build $(BIN)/device >/dev/null
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/gpu.test ./gpu
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/fabric.test ./fabric
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/mesh.test ./engine/mesh
	$(GO) build $(DEVICE_LDFLAGS) -o $(BIN)/device/ ./cmd/doctor ./cmd/ddrun ./examples/opentime ./examples/train
	lib=$$(ldconfig -p | awk '/libfabric\.so\.1 .*x86-64/ {print $$NF; exit}'); \
	  cp -L "$$lib" $(BIN)/device/lib/libfabric.so.1 && \
	  ldd "$$lib" | awk '$$3 ~ /^\// && $$1 !~ /^(libc|libm|libpthread|libdl|ld-linux)/ {print $$3}' | \
	  xargs -I{} cp -L {} $(BIN)/device/lib/
	strip $(BIN)/device/*.test $(BIN)/device/ddtop $(BIN)/device/ddtop-base $(BIN)/device/ddtopcost $(BIN)/device/cpuof
	tar -C $(BIN) -czf $(BIN)/device.tgz device && ls -la $(BIN)/device.tgz
