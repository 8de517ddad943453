package telemetry

import "testing"

// TestLoaderDepth: prefetch auto's bound lies in the loader block's old
// padding behind feature bit 1, and SetLoaderPrefetch moves the depth a
// viewer reads; a segment without the bit reads no bound even where the
// word is not zero.
func TestLoaderDepth(t *testing.T) {
	w := newTestWriter(t, WriterOptions{Dir: t.TempDir(), Rank: 0, World: 2, MaxVars: 1, MaxReaders: 2, RingSize: 8})
	w.SetLoaderConfig(LoaderConfig{Workers: 4, Prefetch: 4, Readers: LoaderReadersThread, BatchRows: 8, PrefetchMax: 16})
	w.SetLoaderPrefetch(11)
	s := openTest(t, w.Path())
	if s.h.features&featLoaderDepth == 0 {
		t.Fatal("writer did not set the loader-depth feature")
	}
	want := LoaderConfig{Workers: 4, Prefetch: 11, Readers: LoaderReadersThread, BatchRows: 8, PrefetchMax: 16}
	if c := snapshot(t, s).Loader.Config; c != want {
		t.Fatalf("loader config %+v, want %+v", c, want)
	}
	s.h.features &^= featLoaderDepth // a writer that does not know the word
	want.PrefetchMax = 0
	if c := snapshot(t, s).Loader.Config; c != want {
		t.Fatalf("without the feature: loader config %+v, want %+v", c, want)
	}
}
