package fabric

import (
	"fmt"
	"math/rand"
	"testing"
)

// BenchmarkRead measures Reader.Read (inflight=1) and Reader.ReadBatch with
// 128 in flight (batches of 1024 rows) from a target process exporting
// 256 MiB, at random row offsets. BenchmarkReadBaselineC drives the same
// reads from a plain C loop on the same kind of endpoint (one cgo call per
// batch of rows). Compare the two at equal names. On software-RMA providers
// (tcp) BenchmarkRead also has gather: the same batches through ReadGather.
//
//	go test ./fabric -run '^$' -bench BenchmarkRead -benchtime=2000x
func BenchmarkRead(b *testing.B) { benchReads(b, false) }

func BenchmarkReadBaselineC(b *testing.B) { benchReads(b, true) }

const benchBatch = 1024

func benchReads(b *testing.B, baseline bool) {
	for _, pc := range provCases {
		b.Run("prov="+pc.name, func(b *testing.B) {
			o := pc.opts
			o.Window = 128
			f := openOrSkip(b, o)
			tg := startTarget(b, o, targetMiB<<20, false)
			r, p := readerOf(b, f, tg)
			dstMem, err := Alloc(128 * 1048576)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { dstMem.Free() })
			// Connect and warm up before measuring.
			warm := make([]ReadOp, 256)
			for i := range warm {
				warm[i] = ReadOp{Dst: dstMem.Bytes()[i*4096 : (i+1)*4096], Peer: p, Addr: tg.base + uint64(i)*4096, Key: tg.key}
			}
			if _, err := r.ReadBatch(warm); err != nil {
				b.Fatal(err)
			}
			if f.Info().SoftwareRMA {
				// The target connects back to the reader on its first reply.
				if _, err := r.ReadGather(warm); err != nil {
					b.Fatal(err)
				}
			}
			for _, row := range []int{3072, 12800, 204800, 1048576} {
				b.Run(fmt.Sprintf("row=%d", row), func(b *testing.B) {
					slots := 128
					if slots*row > 64<<20 {
						slots = (64 << 20) / row
					}
					dst := dstMem.Bytes()[:slots*row]
					nrows := tg.size / row
					rng := rand.New(rand.NewSource(int64(row)))
					offs := make([]uint64, 4*benchBatch)
					for i := range offs {
						offs[i] = uint64(rng.Intn(nrows) * row)
					}
					ops := make([]ReadOp, len(offs))
					for i := range ops {
						s := i % slots
						ops[i] = ReadOp{Dst: dst[s*row : (s+1)*row], Peer: p, Addr: tg.base + offs[i], Key: tg.key}
					}
					modes := []int{1, 128}
					if !baseline && f.Info().SoftwareRMA {
						modes = append(modes, -1) // ReadGather
					}
					for _, infl := range modes {
						name := fmt.Sprintf("inflight=%d", infl)
						if infl < 0 {
							name = "gather"
						}
						b.Run(name, func(b *testing.B) {
							b.SetBytes(int64(row))
							b.ReportAllocs()
							b.ResetTimer()
							for done := 0; done < b.N; {
								start := done % len(ops) // multiple of benchBatch
								n := min(b.N-done, benchBatch, len(ops)-start)
								var err error
								switch {
								case baseline:
									_, err = r.baselineRead(p, dst, row, offs[start:start+n], tg.base, tg.key, infl)
								case infl < 0:
									_, err = r.ReadGather(ops[start : start+n])
								case infl == 1:
									for i := start; i < start+n && err == nil; i++ {
										_, err = r.Read(ops[i])
									}
								default:
									_, err = r.ReadBatch(ops[start : start+n])
								}
								if err != nil {
									b.Fatal(err)
								}
								done += n
							}
							el := b.Elapsed()
							b.ReportMetric(float64(el.Nanoseconds())/1e3/float64(b.N), "us/row")
							b.ReportMetric(float64(b.N)*float64(row)/el.Seconds()/1e9, "GB/s")
						})
					}
				})
			}
		})
	}
}
