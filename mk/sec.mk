# Security (issue 30): fuzz targets of the control-message decoders the
# auth handshake, the mesh wire and the tcp rendezvous frames. Each runs
# FUZZ_SEC_EXECS executions; the inputs found interesting are copied into
# the package's testdata/fuzz (go test replays them).

.PHONY: fuzz-auth fuzz-mesh fuzz-rendezvous

# examples/netns/netns-test.sh step 4 holds a rank back with iptables.
DEPS += iptables:iptables

FUZZ_TARGETS += fuzz-auth fuzz-mesh fuzz-rendezvous
FUZZ_SEC_EXECS ?= 1000000x

# fuzz_run is in mk/engine.mk.
fuzz-auth: deps
	$(call fuzz_run,engine/auth,FuzzHandshake,$(FUZZ_SEC_EXECS))
fuzz-mesh: deps
	$(call fuzz_run,engine/mesh,FuzzMeshWire,$(FUZZ_SEC_EXECS))
fuzz-rendezvous: deps
	$(call fuzz_run,engine/bootstrap,FuzzRendezvousFrame,$(FUZZ_SEC_EXECS))

# authcost: the added cost of authentication on Open (16 ranks, paired
# ABBA, secret against DDSTORE_INSECURE=1). authcost-bins builds what it
# needs, for a quiet machine without Go (BIN=bin bash examples/opentime/authcost.sh).
.PHONY: authcost authcost-bins
authcost-bins: deps
	$(GO) build -o $(BIN)/ ./cmd/ddrun ./examples/opentime
authcost: authcost-bins
	flock /tmp/ddstore-bench.lock env BIN=$(BIN) bash examples/opentime/authcost.sh
