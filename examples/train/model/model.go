// Package model is the synthetic data set and the small dense model of the
// example trainer (examples/train) and the loader benchmark (examples/bench):
// images whose pixels derive from their global row index, labels derived
// from the same class, and softmax regression trained with plain SGD in
// float32. Every sum runs in a fixed order, so results are bit-identical
// for identical batches, whatever loaded them.
package model

import (
	"encoding/binary"
	"math"
)

// Classes is the number of labels.
const Classes = 10

// Pixels returns the pixels per image at scale S: (28·S)².
func Pixels(scale int) int { return 28 * scale * 28 * scale }

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit maps a hash to [0, 1) with 24 bits, exact in float32.
func unit(h uint64) float32 { return float32(h>>40) / (1 << 24) }

// Label is the class of global row g.
func Label(g int64) int64 { return int64(splitmix(uint64(g)^0x51ab) % Classes) }

// Pixel is pixel p of the image of global row g: its class's template
// (a fixed pattern per class) plus per-row noise. The label is learnable
// from the pixels.
func Pixel(g int64, p int) float32 {
	c := uint64(Label(g))
	tmpl := unit(splitmix(c<<32 | uint64(p)))
	noise := unit(splitmix(uint64(g)<<20 ^ uint64(p) ^ 0xabcdef))
	return 0.6*tmpl + 0.4*noise
}

// FillImages writes the images of rows first.. first+len(dst)/(4·Pixels)
// into dst as little-endian float32.
func FillImages(dst []byte, first int64, scale int) {
	px := Pixels(scale)
	rows := len(dst) / (4 * px)
	for i := range rows {
		g := first + int64(i)
		for p := range px {
			binary.LittleEndian.PutUint32(dst[(i*px+p)*4:], math.Float32bits(Pixel(g, p)))
		}
	}
}

// FillLabels writes the labels of rows first.. as little-endian int64.
func FillLabels(dst []byte, first int64) {
	for i := range len(dst) / 8 {
		binary.LittleEndian.PutUint64(dst[i*8:], uint64(Label(first+int64(i))))
	}
}

// Model is a small dense classifier: with Hidden > 0 a 2-layer MLP
// (ReLU), logits = W2·relu(W1·x + b1) + b2; with Hidden == 0 softmax
// regression, logits = W·x + b. Params holds W1, b1, W2, b2 (row-major),
// or W, b.
type Model struct {
	In, Hidden int
	Params     []float32
	grad       []float32
	x, h, dh   []float32
	logits     [Classes]float32
}

// New returns a model over in inputs and hidden units (0: none) with a
// fixed initialisation from seed.
func New(in, hidden int, seed int64) *Model {
	n := Classes*in + Classes
	if hidden > 0 {
		n = hidden*in + hidden + Classes*hidden + Classes
	}
	m := &Model{In: in, Hidden: hidden, Params: make([]float32, n), grad: make([]float32, n),
		x: make([]float32, in), h: make([]float32, hidden), dh: make([]float32, hidden)}
	init := func(w []float32, fanIn int, salt uint64) {
		scale := 2 / float32(math.Sqrt(float64(fanIn)))
		for i := range w {
			w[i] = (unit(splitmix(uint64(seed)<<32^uint64(i)^salt<<56)) - 0.5) * scale
		}
	}
	if hidden > 0 {
		init(m.Params[:hidden*in], in, 1)
		off := hidden*in + hidden
		init(m.Params[off:off+Classes*hidden], hidden, 2)
	} else {
		init(m.Params[:Classes*in], in, 1)
	}
	return m
}

// layers returns the weight and bias slices of params p.
func (m *Model) layers(p []float32) (w1, b1, w2, b2 []float32) {
	in, h := m.In, m.Hidden
	if h == 0 {
		return nil, nil, p[:Classes*in], p[Classes*in:]
	}
	w1, p = p[:h*in], p[h*in:]
	b1, p = p[:h], p[h:]
	w2, p = p[:Classes*h], p[Classes*h:]
	return w1, b1, w2, p
}

func dot(a, b []float32, acc float32) float32 {
	b = b[:len(a)]
	for i, v := range a {
		acc += v * b[i]
	}
	return acc
}

func axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// Step runs forward and backward over a batch (images as little-endian
// float32 rows of In pixels, labels as int64) and one SGD step with
// learning rate lr on the batch's mean gradient. It returns the sum of the
// per-sample cross-entropy losses (float64, summed in sample order).
func (m *Model) Step(images, labels []byte, lr float32) float64 {
	n := len(labels) / 8
	if n == 0 {
		return 0
	}
	clear(m.grad)
	in := m.In
	w1, b1, w2, b2 := m.layers(m.Params)
	gw1, gb1, gw2, gb2 := m.layers(m.grad)
	var lossSum float64
	for s := range n {
		x := m.x
		row := images[s*in*4 : (s+1)*in*4]
		for p := range x {
			x[p] = math.Float32frombits(binary.LittleEndian.Uint32(row[p*4:]))
		}
		y := int(binary.LittleEndian.Uint64(labels[s*8:]))
		feat := x
		if m.Hidden > 0 {
			for j := range m.h {
				m.h[j] = max(0, dot(w1[j*in:(j+1)*in], x, b1[j]))
			}
			feat = m.h
		}
		k := len(feat)
		maxLogit := float32(math.Inf(-1))
		for c := range Classes {
			m.logits[c] = dot(w2[c*k:(c+1)*k], feat, b2[c])
			maxLogit = max(maxLogit, m.logits[c])
		}
		var z float64
		var e [Classes]float64
		for c := range Classes {
			e[c] = math.Exp(float64(m.logits[c] - maxLogit))
			z += e[c]
		}
		lossSum += math.Log(z) - float64(m.logits[y]-maxLogit)
		clear(m.dh)
		for c := range Classes {
			d := float32(e[c] / z)
			if c == y {
				d -= 1
			}
			axpy(d, feat, gw2[c*k:(c+1)*k])
			gb2[c] += d
			if m.Hidden > 0 {
				axpy(d, w2[c*k:(c+1)*k], m.dh)
			}
		}
		for j, d := range m.dh {
			if m.h[j] <= 0 {
				continue
			}
			axpy(d, x, gw1[j*in:(j+1)*in])
			gb1[j] += d
		}
	}
	scale := lr / float32(n)
	for i, g := range m.grad {
		m.Params[i] -= scale * g
	}
	return lossSum
}
