# A lent GPU machine (no Go, no libfabric there): make device-bundle builds
# everything examples/device/run.sh needs into bin/device (test binaries,
# bin/doctor, bin/ddtop, ddtopcost, and libfabric.so.1 with the libraries
# it loads), small enough to travel with the working tree. On that machine:
#   bash examples/device/run.sh bin/device OUTDIR
.PHONY: device-bundle
DEVICE_LDFLAGS := -ldflags=-s\ -w
device-bundle: deps
	rm -rf $(BIN)/device && mkdir -p $(BIN)/device/lib
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/gpu.test ./gpu
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/engine.test ./engine
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/fabric.test ./fabric
	$(GO) test -c $(DEVICE_LDFLAGS) -o $(BIN)/device/telemetry.test ./telemetry
	$(GO) build $(DEVICE_LDFLAGS) -o $(BIN)/device/ ./cmd/doctor ./cmd/ddtop ./examples/ddtopcost
	lib=$$(ldconfig -p | awk '/libfabric\.so\.1 .*x86-64/ {print $$NF; exit}'); \
	  cp -L "$$lib" $(BIN)/device/lib/libfabric.so.1 && \
	  ldd "$$lib" | awk '$$3 ~ /^\// && $$1 !~ /^(libc|libm|libpthread|libdl|ld-linux)/ {print $$3}' | \
	  xargs -I{} cp -L {} $(BIN)/device/lib/
	tar -C $(BIN) -czf $(BIN)/device.tgz device && ls -la $(BIN)/device.tgz
