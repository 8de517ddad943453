package main

import (
	"os"
	"strings"
	"testing"
)

// TestHeaderIsCurrent: ddstore.h's error codes are fault.Classes'.
func TestHeaderIsCurrent(t *testing.T) {
	h, err := os.ReadFile("../ddstore.h")
	if err != nil {
		t.Fatal(err)
	}
	want, err := rewrite(h)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(h) {
		t.Fatal("python/libddstore/ddstore.h's error codes differ from fault.Classes: run go generate ./python/libddstore")
	}
	if !strings.Contains(string(h), "DDS_ERR_PEER_DEAD = 7,") {
		t.Fatal("the header lost DDS_ERR_PEER_DEAD")
	}
}
