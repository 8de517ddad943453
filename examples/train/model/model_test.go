package model

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestDataDerivesFromIndex(t *testing.T) {
	px := Pixels(1)
	if px != 784 || Pixels(2) != 3136 {
		t.Fatalf("Pixels(1)=%d Pixels(2)=%d", px, Pixels(2))
	}
	img := make([]byte, 3*px*4)
	FillImages(img, 100, 1)
	lab := make([]byte, 3*8)
	FillLabels(lab, 100)
	counts := map[int64]int{}
	for i := range 3 {
		g := int64(100 + i)
		if l := int64(binary.LittleEndian.Uint64(lab[i*8:])); l != Label(g) || l < 0 || l >= Classes {
			t.Fatalf("label of row %d: %d, want %d", g, l, Label(g))
		}
		for p := range px {
			v := math.Float32frombits(binary.LittleEndian.Uint32(img[(i*px+p)*4:]))
			if v != Pixel(g, p) || v < 0 || v >= 1 {
				t.Fatalf("pixel %d of row %d: %v, want %v in [0,1)", p, g, v, Pixel(g, p))
			}
		}
	}
	for g := range int64(10000) {
		counts[Label(g)]++
	}
	for c := range int64(Classes) {
		if counts[c] < 800 || counts[c] > 1200 {
			t.Fatalf("class %d has %d of 10000 rows: labels not balanced", c, counts[c])
		}
	}
}

func TestStepLearnsAndIsDeterministic(t *testing.T) {
	const n = 64
	px := Pixels(1)
	img := make([]byte, n*px*4)
	lab := make([]byte, n*8)
	FillImages(img, 0, 1)
	FillLabels(lab, 0)
	for _, hidden := range []int{0, 16} {
		a, b := New(px, hidden, 3), New(px, hidden, 3)
		first := a.Step(img, lab, 0.01)
		var last float64
		for range 20 {
			last = a.Step(img, lab, 0.01)
		}
		if !(last < first) {
			t.Fatalf("hidden %d: loss %v → %v does not decrease", hidden, first, last)
		}
		if got := b.Step(img, lab, 0.01); got != first {
			t.Fatalf("hidden %d: same model, same batch, different loss %v vs %v", hidden, got, first)
		}
	}
}
