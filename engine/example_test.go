package engine_test

import (
	"errors"
	"io"
	"log"

	"github.com/ddstore/ddstore/engine"
)

// A training job: load the config, open the store under any launcher, add
// this rank's shards, and read batches of any global rows. (Compiled, not
// run: it needs a launcher's ranks.)
func Example() {
	cfg, err := engine.LoadConfig("")
	if err != nil {
		log.Fatal(err)
	}
	s, err := engine.Open(cfg.StoreOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	const rowElems = 28 * 28
	images := make([]byte, 1024*rowElems*4) // this rank's 1024 rows of float32
	if err := s.Add("image", engine.Float32, rowElems, images); err != nil {
		log.Fatal(err)
	}

	dst := make([]byte, 3*rowElems*4)
	if err := s.GetBatch("image", []int64{7, 2048, 7}, dst); errors.Is(err, engine.ErrIndex) {
		log.Printf("fewer rows than asked: %v", err)
	}

	l, err := s.NewLoader(cfg.LoaderOptions([]string{"image"}, 64, 1))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ep, err := l.Epoch(0)
	if err != nil {
		log.Fatal(err)
	}
	for {
		b, err := ep.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		_ = b.Data[0] // 64 rows of image, contiguous
		b.Release()
	}
}
