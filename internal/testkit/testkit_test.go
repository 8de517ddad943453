package testkit

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMutate(t *testing.T) {
	orig := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		muts []byte
		cut  int
		want []byte
	}{
		{nil, 3, orig},
		{[]byte{2, 0, 0xff}, 3, []byte{1, 2, 0xfc, 4, 5, 6, 7, 8, 9, 10}},
		{[]byte{13, 0, 0x0f}, 3, []byte{1, 2, 0x0c, 4, 5, 6, 7, 8, 9, 10}}, // 13 mod 11 = 2
		{[]byte{10, 0, 0x42}, 3, append(bytes.Clone(orig), 0x42)},          // at len: append
		{[]byte{0, 0, 1, 1}, 3, []byte{0, 2, 3, 4, 5, 6, 7}},               // flip, then cut 3
		{[]byte{2}, 3, []byte{1, 2, 3, 4}},                                 // cut 2*3
		{[]byte{9}, 8, []byte{1, 2}},                                       // 9 mod 8: cut 8
		{[]byte{1, 1}, 8, nil},                                             // 10 - 8 - 8 < 0
	} {
		in := bytes.Clone(orig)
		got := Mutate(in, c.muts, c.cut)
		if !bytes.Equal(got, c.want) {
			t.Errorf("Mutate(%v, %d) = %v, want %v", c.muts, c.cut, got, c.want)
		}
		if !bytes.Equal(in, orig) {
			t.Fatalf("Mutate changed its input: %v", in)
		}
	}
}

// TestEach: every index runs once, all at the same time (each waits for
// the others to start; one by one it would time out), and each index's
// error comes back in its place.
func TestEach(t *testing.T) {
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	var runs [n]atomic.Int32
	errs := Each(n, func(i int) error {
		runs[i].Add(1)
		started.Done()
		select {
		case <-all:
		case <-time.After(time.Minute):
			return fmt.Errorf("index %d: the others did not start within a minute", i)
		}
		if i%2 == 1 {
			return fmt.Errorf("odd %d", i)
		}
		return nil
	})
	if len(errs) != n {
		t.Fatalf("%d errors, want %d", len(errs), n)
	}
	for i, err := range errs {
		if runs[i].Load() != 1 {
			t.Errorf("index %d ran %d times", i, runs[i].Load())
		}
		want := ""
		if i%2 == 1 {
			want = fmt.Sprintf("odd %d", i)
		}
		if got := fmt.Sprint(err); (err == nil) != (want == "") || (err != nil && got != want) {
			t.Errorf("index %d: error %v, want %q", i, err, want)
		}
	}
}
