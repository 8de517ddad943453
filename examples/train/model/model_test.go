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
	// Hand-computed from the definitions (splitmix64 of g^0x51ab mod 10;
	// 0.6·template + 0.4·noise in float32), not from Label/Pixel.
	img0 := make([]byte, 5*px*4)
	FillImages(img0, 0, 1)
	lab0 := make([]byte, 5*8)
	FillLabels(lab0, 0)
	for g, want := range []int64{3, 2, 1, 6, 2} {
		if l := int64(binary.LittleEndian.Uint64(lab0[g*8:])); l != want {
			t.Fatalf("label of row %d: %d, want %d", g, l, want)
		}
	}
	// Rows 1 and 4 share label 2: their images still differ (a row's data
	// depends on its index, not only on its class).
	if string(img0[1*px*4:2*px*4]) == string(img0[4*px*4:5*px*4]) {
		t.Fatal("rows 1 and 4 (both label 2) have the same image")
	}
	pix := func(g, p int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(img0[(g*px+p)*4:])) }
	for _, w := range []struct {
		g, p int
		v    float32
	}{{0, 0, 0.19395998}, {0, 1, 0.68706882}, {1, 0, 0.90894723}} {
		if v := pix(w.g, w.p); math.Abs(float64(v-w.v)) > 1e-6 {
			t.Fatalf("pixel %d of row %d: %v, want %v", w.p, w.g, v, w.v)
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
