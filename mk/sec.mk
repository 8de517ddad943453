# Security (issue 30): fuzz targets of the control-message decoders the
# auth handshake, the mesh wire and the tcp rendezvous frames. Each runs
# FUZZ_SEC_EXECS executions; the inputs found interesting are copied into
# the package's testdata/fuzz (go test replays them).

.PHONY: fuzz-auth fuzz-mesh fuzz-rendezvous

# examples/netns/netns-test.sh step 4 holds a rank back with iptables.
DEPS += iptables:iptables

FUZZ_TARGETS += fuzz-auth fuzz-mesh fuzz-rendezvous
FUZZ_SEC_EXECS ?= 1000000x

# fuzz-one PKG TARGET
define fuzz-one
	$(GO) test -run '^$$' -fuzz '^$(2)$$' -fuzztime $(FUZZ_SEC_EXECS) -parallel 2 ./$(1)
	@d="$$($(GO) env GOCACHE)/fuzz/github.com/ddstore/ddstore/$(1)/$(2)"; \
	if [ -d "$$d" ]; then mkdir -p $(1)/testdata/fuzz/$(2) && cp -n "$$d"/* $(1)/testdata/fuzz/$(2)/; \
	echo "corpus: $$(ls $(1)/testdata/fuzz/$(2) | wc -l) inputs in $(1)/testdata/fuzz/$(2)"; fi
endef

fuzz-auth: deps
	$(call fuzz-one,engine/auth,FuzzHandshake)
fuzz-mesh: deps
	$(call fuzz-one,engine/mesh,FuzzMeshWire)
fuzz-rendezvous: deps
	$(call fuzz-one,engine/bootstrap,FuzzRendezvousFrame)

# authcost: the added cost of authentication on Open (16 ranks, paired
# ABBA, secret against DDSTORE_INSECURE=1). authcost-bins builds what it
# needs, for a quiet machine without Go (BIN=bin bash examples/opentime/authcost.sh).
.PHONY: authcost authcost-bins
authcost-bins: deps
	$(GO) build -o $(BIN)/ ./cmd/ddrun ./examples/opentime
authcost: authcost-bins
	flock /tmp/ddstore-bench.lock env BIN=$(BIN) bash examples/opentime/authcost.sh
