package fabric

import "testing"

// TestProtocolConstants checks that the Go side and the compiled C agree on
// the gather protocol: the limits Go validates options against are the ones
// the C serves, and the wire headers have the layout both halves encode.
func TestProtocolConstants(t *testing.T) {
	maxBytes, maxEnt := protocolC()
	if maxBytes != maxGatherBytes || maxEnt != maxGatherEntries {
		t.Fatalf("C serves %d bytes / %d entries per request, Go validates %d / %d", maxBytes, maxEnt, maxGatherBytes, maxGatherEntries)
	}
	// The wire layout: request header 32 bytes, entries 24, reply header 32.
	if gatherReqHdr != 32 || gatherEntry != 24 || gatherRepHdr != 32 {
		t.Fatalf("wire headers changed: request %d, entry %d, reply %d bytes", gatherReqHdr, gatherEntry, gatherRepHdr)
	}
	if err := (Options{GatherMaxBytes: maxGatherBytes}).Validate(); err != nil {
		t.Fatalf("GatherMaxBytes at the C limit rejected: %v", err)
	}
	if err := (Options{GatherMaxBytes: maxGatherBytes + 1}).Validate(); err == nil {
		t.Fatal("GatherMaxBytes above the C limit accepted")
	}
}
