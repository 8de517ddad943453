package gpu

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var pciBusID = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$`)

func TestProbe(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		if d.Name == "" || !pciBusID.MatchString(d.PCIBusID) || d.Major < 1 || d.DriverVersion <= 0 || d.Library == "" || d.TotalMemory <= 0 {
			t.Fatalf("incomplete probe: %+v", d)
		}
		if !strings.Contains(d.String(), d.Name) || !strings.Contains(d.String(), d.PCIBusID) {
			t.Fatalf("String() = %q lacks the name or PCI id", d.String())
		}
		switch b.name {
		case "standin-cuda":
			want := "cuda:0 ddstore stand-in CUDA GPU (compute 9.0, PCI 0000:10:00.0, driver 12.8, "
			if !strings.HasPrefix(d.String(), want) {
				t.Fatalf("String() = %q, want prefix %q", d.String(), want)
			}
			if d.TotalMemory != 80<<30 {
				t.Fatalf("TotalMemory = %d, want the stand-in's 80 GiB", d.TotalMemory)
			}
		case "standin-hip":
			if d.Runtime != HIP || d.PCIBusID != "0000:c1:00.0" || d.DriverVersionString() != "60342134" || d.TotalMemory != 64<<30 {
				t.Fatalf("HIP probe: %s", d)
			}
		case "real":
			// examples/gpu/check.sh prints this line.
			fmt.Printf("GPU PROBE: runtime=%s device=%d name=%q pci=%s compute=%d.%d memory=%d MiB driver=%s (%d) library=%s\n",
				d.Runtime, d.Index, d.Name, d.PCIBusID, d.Major, d.Minor, d.TotalMemory>>20, d.DriverVersionString(), d.DriverVersion, d.Library)
		}
	})
}

func TestBuffers(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		s := closing(t, must[*Stream](t)(d.NewStream()))
		for _, n := range []int{1, 7, 4095, 1<<20 + 13} {
			buf := must[*Buffer](t)(d.Alloc(n))
			if buf.Len() != n || buf.Ptr() == 0 {
				t.Fatalf("Alloc(%d) = ptr %#x len %d", n, buf.Ptr(), buf.Len())
			}
			// The last byte is reachable, one past it is not.
			if err := s.CopyIn(buf, n-1, []byte{1}); err != nil {
				t.Fatal(err)
			}
			if err := s.CopyIn(buf, n, []byte{1}); !errors.Is(err, ErrInvalid) {
				t.Fatalf("copy past the end of %d bytes: %v, want ErrInvalid", n, err)
			}
			if err := s.CopyIn(buf, -1, []byte{1}); !errors.Is(err, ErrInvalid) {
				t.Fatalf("copy at -1: %v, want ErrInvalid", err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := buf.Free(); err != nil {
				t.Fatal(err)
			}
			if err := buf.Free(); err != nil {
				t.Fatalf("second Free: %v", err)
			}
			if err := s.CopyIn(buf, 0, []byte{1}); !errors.Is(err, ErrClosed) {
				t.Fatalf("copy into a freed buffer: %v, want ErrClosed", err)
			}
		}
		if _, err := d.Alloc(0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Alloc(0): %v, want ErrInvalid", err)
		}
		// Wrap: memory owned elsewhere is written through, never freed.
		owner := must[*Buffer](t)(d.Alloc(4096))
		defer owner.Free()
		w := must[*Buffer](t)(d.Wrap(owner.Ptr()+100, 200))
		src := make([]byte, 200)
		fillRow(src, 5)
		if err := s.CopyIn(w, 0, src); err != nil {
			t.Fatal(err)
		}
		if err := w.Free(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 200)
		if err := s.ReadBack(got, owner, 100); err != nil {
			t.Fatal(err)
		}
		checkRows(t, "through Wrap", got, 5, 200)
		if _, err := d.Wrap(0, 10); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Wrap(0): %v, want ErrInvalid", err)
		}
		// Rebind moves a wrapped buffer without allocating; owned ones stay.
		fillRow(src, 6)
		if allocs := testing.AllocsPerRun(10, func() {
			if err := w.Rebind(owner.Ptr()+1000, 200); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Fatalf("Rebind: %v allocations", allocs)
		}
		if err := s.CopyIn(w, 0, src); err != nil {
			t.Fatal(err)
		}
		if err := s.ReadBack(got, owner, 1000); err != nil {
			t.Fatal(err)
		}
		checkRows(t, "through a rebound Wrap", got, 6, 200)
		if err := owner.Rebind(owner.Ptr(), 10); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Rebind of an allocated buffer: %v, want ErrInvalid", err)
		}
	})
}

func TestPinned(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		p := must[*Pinned](t)(d.AllocPinned(1 << 20))
		if len(p.Bytes()) != 1<<20 {
			t.Fatalf("AllocPinned: %d bytes", len(p.Bytes()))
		}
		// Registering the same memory twice is the driver's error, named.
		_, err := d.Register(p.Bytes())
		var e *Error
		if !errors.Is(err, ErrDriver) || !errors.As(err, &e) || !strings.Contains(e.Op, "Register") {
			t.Fatalf("second registration: %v, want a driver error from the register call", err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		// Memory mapped elsewhere (a shard) is registered once and kept.
		mem, err := unix.Mmap(-1, 0, 3<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(mem)
		reg := must[*Pinned](t)(d.Register(mem))
		if err := reg.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Register(nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Register(nil): %v, want ErrInvalid", err)
		}
	})
}

// TestCopies copies rows in from pinned and from pageable memory, at odd
// sizes and offsets, copies them back and checks every byte.
func TestCopies(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		s := closing(t, must[*Stream](t)(d.NewStream()))
		const off = 7
		for _, rowSize := range []int{1, 3, 3072, 4097, 12800, 1<<20 + 13} {
			rows := max(1, (2<<20)/rowSize)
			n := rows * rowSize
			dst := must[*Buffer](t)(d.Alloc(n + off))
			pinned := must[*Pinned](t)(d.AllocPinned(n))
			for r := 0; r < rows; r++ {
				fillRow(pinned.Bytes()[r*rowSize:(r+1)*rowSize], 1000+r)
			}
			// Row by row, as a reader's local rows would go.
			for r := 0; r < rows; r++ {
				if err := s.CopyIn(dst, off+r*rowSize, pinned.Bytes()[r*rowSize:(r+1)*rowSize]); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if err := s.ReadBack(got, dst, off); err != nil {
				t.Fatal(err)
			}
			checkRows(t, fmt.Sprintf("pinned, %d-byte rows", rowSize), got, 1000, rowSize)

			// From Go memory: the driver stages it, so overwriting the
			// source right after the call cannot change what lands.
			src := make([]byte, n)
			for r := 0; r < rows; r++ {
				fillRow(src[r*rowSize:(r+1)*rowSize], 5000+r)
			}
			if err := s.CopyIn(dst, off, src); err != nil {
				t.Fatal(err)
			}
			clear(src)
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := s.ReadBack(got, dst, off); err != nil {
				t.Fatal(err)
			}
			checkRows(t, fmt.Sprintf("pageable, %d-byte rows", rowSize), got, 5000, rowSize)
			if err := errors.Join(pinned.Close(), dst.Free()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestStager moves batches larger than the staging buffer, packed row by
// row as the engine will, and odd-sized writes, through the two halves.
func TestStager(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		s := closing(t, must[*Stream](t)(d.NewStream()))
		const chunk = 64 << 10
		st := closing(t, must[*Stager](t)(s.NewStager(chunk)))
		if st.Chunk() != chunk {
			t.Fatalf("Chunk() = %d", st.Chunk())
		}
		for _, rowSize := range []int{3072, 12800, 100_001} { // the last is larger than a half
			const rows = 300
			dst := must[*Buffer](t)(d.Alloc(rows * rowSize))
			row := make([]byte, rowSize)
			if rowSize <= chunk {
				// Pack whole rows into each half; send when the next would not fit.
				var buf []byte
				used, first := 0, 0
				for r := 0; r < rows; r++ {
					if buf == nil || used+rowSize > len(buf) {
						if buf != nil {
							if err := st.Send(dst, first*rowSize, used); err != nil {
								t.Fatal(err)
							}
						}
						buf = must[[]byte](t)(st.Next())
						used, first = 0, r
					}
					fillRow(buf[used:used+rowSize], 70_000+r)
					used += rowSize
				}
				if err := st.Send(dst, first*rowSize, used); err != nil {
					t.Fatal(err)
				}
				if err := st.Wait(); err != nil {
					t.Fatal(err)
				}
			} else {
				for r := 0; r < rows; r++ {
					fillRow(row, 70_000+r)
					if err := st.Write(dst, r*rowSize, row); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := make([]byte, rows*rowSize)
			if err := s.ReadBack(got, dst, 0); err != nil {
				t.Fatal(err)
			}
			checkRows(t, fmt.Sprintf("staged %d-byte rows", rowSize), got, 70_000, rowSize)
			if err := dst.Free(); err != nil {
				t.Fatal(err)
			}
		}
		// One odd-sized write of many halves.
		const n = 1_000_003
		dst := must[*Buffer](t)(d.Alloc(n))
		defer dst.Free()
		src := make([]byte, n)
		fillRow(src, 9)
		if err := st.Write(dst, 0, src); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := s.ReadBack(got, dst, 0); err != nil {
			t.Fatal(err)
		}
		checkRows(t, "odd-sized write", got, 9, n)

		// Misuse is an error, never a panic.
		if _, err := st.Next(); err != nil {
			t.Fatal(err)
		}
		if err := st.Send(dst, 0, chunk+1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Send of more than a half: %v, want ErrInvalid", err)
		}
		if err := st.Send(dst, n-10, 11); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Send past the buffer: %v, want ErrInvalid", err)
		}
		if err := st.Write(dst, 1, src); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Write past the buffer: %v, want ErrInvalid", err)
		}
	})
}

// TestStagerOn: a stager over the caller's off-heap memory (the engine's
// fabric.Alloc staging) registers it once, moves odd sizes through it,
// and leaves the memory mapped at Close.
func TestStagerOn(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		s := closing(t, must[*Stream](t)(d.NewStream()))
		const chunk = 40_000
		mem, err := unix.Mmap(-1, 0, 2*chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(mem)
		if _, err := s.NewStagerOn([2][]byte{mem[:chunk], mem[chunk : 2*chunk-1]}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("unequal halves: %v, want ErrInvalid", err)
		}
		st := must[*Stager](t)(s.NewStagerOn([2][]byte{mem[:chunk:chunk], mem[chunk:]}))
		const n = 123_457
		dst := must[*Buffer](t)(d.Alloc(n))
		defer dst.Free()
		src := make([]byte, n)
		fillRow(src, 31)
		if err := st.Write(dst, 0, src); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := s.ReadBack(got, dst, 0); err != nil {
			t.Fatal(err)
		}
		checkRows(t, "through caller's halves", got, 31, n)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		mem[0], mem[2*chunk-1] = 1, 2 // still mapped, and ours
	})
}

// busyFor is how long the tests hold the default stream busy: a reader's
// copy and sync take micro- to milliseconds, so even on a loaded 2-core
// machine, where the test may be descheduled for hundreds of milliseconds
// between two host-side calls, they finish well inside it (checks such as
// "still busy after queueing" depend on it). Longer under the race
// detector.
const busyFor = 2 * time.Second * raceScale

// TestDefaultStreamBusy: a busy legacy default stream (training kernels)
// must not delay a reader's non-blocking stream, and must delay a
// context-wide sync. The blocking stream is the control: it is delayed,
// so the first check can fail.
func TestDefaultStreamBusy(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		s := closing(t, must[*Stream](t)(d.NewStream()))
		legacy := closing(t, must[*Stream](t)(d.newStream(true)))
		src := must[*Pinned](t)(d.AllocPinned(1 << 20))
		defer src.Close()
		fillRow(src.Bytes(), 42)
		dst := must[*Buffer](t)(d.Alloc(1 << 20))
		defer dst.Free()

		start := time.Now()
		busy := must[*Busy](t)(d.BusyDefaultStream(busyFor))
		t.Logf("default stream busy for %v by %s", busy.Planned, busy.Method)
		if err := s.CopyIn(dst, 0, src.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		readerSync := time.Since(start)
		if done := !stillBusy(t, busy); done || readerSync > busy.Planned/2 {
			t.Fatalf("reader stream sync took %v and the default stream was done=%v: it waited for the default stream", readerSync, done)
		}
		got := make([]byte, 1<<20)
		if err := s.ReadBack(got, dst, 0); err != nil {
			t.Fatal(err)
		}
		checkRows(t, "copied beside a busy default stream", got, 42, 1<<20)

		// The control: a blocking stream's copy waits for the default stream.
		if err := legacy.CopyIn(dst, 0, src.Bytes()[:4096]); err != nil {
			t.Fatal(err)
		}
		if err := legacy.Sync(); err != nil {
			t.Fatal(err)
		}
		if stillBusy(t, busy) {
			t.Fatal("a blocking stream's sync returned while the default stream was busy: the model cannot tell the streams apart")
		}
		if err := busy.Wait(); err != nil {
			t.Fatal(err)
		}

		// Context-wide sync waits for the busy period.
		start = time.Now()
		busy = must[*Busy](t)(d.BusyDefaultStream(busyFor))
		if err := s.CopyIn(dst, 0, src.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		deviceSync := time.Since(start)
		if stillBusy(t, busy) {
			t.Fatalf("context sync returned after %v with the default stream still busy", deviceSync)
		}
		// The spin kernel runs exactly busyFor; memsets only about Planned
		// (measured once, and a loaded host skews the measurement).
		if busy.Method == "ptx spin kernel" && deviceSync < busyFor {
			t.Fatalf("context sync took %v, less than the %v spin", deviceSync, busyFor)
		}
		if err := busy.Wait(); err != nil {
			t.Fatal(err)
		}
		t.Logf("busy %v: reader stream sync %v, context sync %v", busy.Planned, readerSync, deviceSync)
	})
}

// TestBusyMemsetFallback: without the spin kernel, memsets keep the
// default stream busy, and say why.
func TestBusyMemsetFallback(t *testing.T) {
	t.Setenv("DDSTORE_STANDIN_NO_PTX", "1")
	for _, b := range backends {
		if b.name != "standin-cuda" {
			continue
		}
		d := b.open(t)
		busy := must[*Busy](t)(d.BusyDefaultStream(busyFor))
		if !strings.HasPrefix(busy.Method, "memsets (spin kernel unavailable") || !strings.Contains(busy.Method, "cuModuleLoadData") {
			t.Fatalf("Method = %q", busy.Method)
		}
		if busy.Planned < busyFor/2 || busy.Planned > 2*busyFor {
			t.Fatalf("planned %v of memsets for %v", busy.Planned, busyFor)
		}
		if !stillBusy(t, busy) {
			t.Fatal("memsets finished at once")
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		if stillBusy(t, busy) {
			t.Fatal("context sync returned before the memsets finished")
		}
		if err := busy.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// stillBusy reports whether the busy period is still running.
func stillBusy(t testing.TB, b *Busy) bool {
	t.Helper()
	done, err := b.Done()
	if err != nil {
		t.Fatal(err)
	}
	return !done
}

// eventRig opens b's device with a reader stream, the legacy default
// stream wrapped, an event, and 4 KiB of pinned source and device memory.
func eventRig(t *testing.T, b backend) (d *Device, s, def *Stream, ev *Event, src *Pinned, dst *Buffer) {
	d = b.open(t)
	s, def, ev, src, dst = rigOn(t, d)
	return d, s, def, ev, src, dst
}

// rigOn is eventRig's streams, event and buffers on an opened device.
func rigOn(t *testing.T, d *Device) (s, def *Stream, ev *Event, src *Pinned, dst *Buffer) {
	s = closing(t, must[*Stream](t)(d.NewStream()))
	def = closing(t, must[*Stream](t)(d.WrapStream(0)))
	ev = closing(t, must[*Event](t)(d.NewEvent()))
	src = closing(t, must[*Pinned](t)(d.AllocPinned(4096)))
	dst = must[*Buffer](t)(d.Alloc(4096))
	t.Cleanup(func() { dst.Free() })
	return s, def, ev, src, dst
}

// TestEvents: a stream waits on an event of the default stream without
// blocking the host; WaitUntil honours its deadline. The backends (each
// its own driver library) run in parallel: each waits out a busy period.
func TestEvents(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		t.Parallel()
		d, s, def, ev, src, dst := eventRig(t, b)

		busy := must[*Busy](t)(d.BusyDefaultStream(busyFor))
		if err := ev.Record(def); err != nil {
			t.Fatal(err)
		}
		if err := ev.WaitUntil(time.Now().Add(20 * time.Millisecond)); !errors.Is(err, ErrTimeout) {
			t.Fatalf("WaitUntil before the busy period ends: %v, want ErrTimeout", err)
		}
		// Queued behind the event, the wait and a pinned copy return at
		// once: the host never blocks; the copy lands after the busy period.
		if err := errors.Join(s.WaitEvent(ev), s.CopyIn(dst, 0, src.Bytes())); err != nil {
			t.Fatal(err)
		}
		if !stillBusy(t, busy) {
			t.Fatal("queueing a wait and a pinned copy blocked the host until the busy period ended")
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if stillBusy(t, busy) {
			t.Fatal("the stream's work finished before the event it waits on")
		}
		if err := ev.WaitUntil(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if done := must[bool](t)(ev.Done()); !done {
			t.Fatal("event not done after WaitUntil returned nil")
		}
		if err := busy.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWaitsSleep: Stream.Sync and Event.Sync sleep while they wait
// (blocking-sync events): the waiting thread's CPU time stays far below
// the time it waited. The stand-in spins for events without the
// blocking-sync flag and for cuStreamSynchronize, as the drivers do. The
// backends (each its own driver library) run in parallel: each waits out
// six busy periods.
func TestWaitsSleep(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		t.Parallel()
		for _, spin := range []time.Duration{0, -1, 20 * time.Millisecond} {
			t.Run(fmt.Sprintf("spin=%v", spin), func(t *testing.T) { testWaitsSleep(t, b, spin) })
		}
	})
}

// testWaitsSleep: with Options.SpinWait spin, a wait longer than the spin
// still sleeps once the spin is over.
func testWaitsSleep(t *testing.T, b backend, spin time.Duration) {
	d := b.open(t, func(o *Options) { o.SpinWait = spin })
	s, def, ev, src, dst := rigOn(t, d)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, wait := range []struct {
		name string
		f    func() error
	}{{"Stream.Sync", s.Sync}, {"Event.Sync", ev.Sync}} {
		busy := must[*Busy](t)(d.BusyDefaultStream(busyFor))
		if err := errors.Join(ev.Record(def), s.WaitEvent(ev), s.CopyIn(dst, 0, src.Bytes())); err != nil {
			t.Fatal(err)
		}
		cpu0, wall0 := threadCPU(t), time.Now()
		if err := wait.f(); err != nil {
			t.Fatal(err)
		}
		cpu, wall := threadCPU(t)-cpu0, time.Since(wall0)
		if done := !stillBusy(t, busy); !done || wall < 100*time.Millisecond {
			t.Fatalf("%s returned after %v, busy period over: %v; it did not wait for it", wait.name, wall, done)
		}
		if cpu > wall/4 {
			t.Fatalf("%s used %v of CPU while waiting %v: it spins", wait.name, cpu, wall)
		}
		t.Logf("%s waited %v using %v of CPU", wait.name, wall, cpu)
		if err := errors.Join(s.Sync(), busy.Wait()); err != nil {
			t.Fatal(err)
		}
	}
}

func threadCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestThreads: readers on many goroutines, each on OS threads that never
// ran a driver call before, copy and check their rows. Every entry point
// sets the device itself (the stand-ins refuse calls on a thread without
// one), so goroutine migration cannot break it.
func TestThreads(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		const readers, rowSize, rows = 6, 3072, 64
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		for g := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
				errs <- readerRoundTrip(d, g, rowSize, rows)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

func readerRoundTrip(d *Device, g, rowSize, rows int) (err error) {
	s, err := d.NewStream()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	dst, err := d.Alloc(rows * rowSize)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dst.Free()) }()
	src := make([]byte, rowSize)
	for r := 0; r < rows; r++ {
		fillRow(src, g*1000+r)
		if err := s.CopyIn(dst, r*rowSize, src); err != nil {
			return err
		}
		runtime.Gosched()
	}
	if err := s.Sync(); err != nil {
		return err
	}
	got := make([]byte, rows*rowSize)
	if err := s.ReadBack(got, dst, 0); err != nil {
		return err
	}
	for i, v := range got {
		if want := patternByte(g*1000+i/rowSize, i%rowSize); v != want {
			return fmt.Errorf("reader %d: row %d byte %d = %#x, want %#x", g, g*1000+i/rowSize, i%rowSize, v, want)
		}
	}
	return nil
}

// TestQueueProbe: NewStream replaces streams that share the default
// stream's hardware queue. The stand-ins model GPU_MAX_HW_QUEUES=4 (HIP)
// and CUDA_DEVICE_MAX_CONNECTIONS=4 (CUDA): the 1st, 5th and 9th stream
// created collide. Each stream NewStream returns must finish a copy while
// the default stream is busy; without the probe, the first one cannot.
func TestQueueProbe(t *testing.T) {
	t.Setenv("GPU_MAX_HW_QUEUES", "4")
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4")
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		streams := make([]*Stream, 8)
		for i := range streams {
			streams[i] = closing(t, must[*Stream](t)(d.NewStream()))
		}
		t.Logf("%d of %d streams replaced", d.ReplacedStreams(), len(streams)+d.ReplacedStreams())
		if b.standin && d.ReplacedStreams() < 3 {
			t.Fatalf("replaced %d streams, want at least 3 (streams 0, 4 and 8 share queue 0)", d.ReplacedStreams())
		}
		dst := must[*Buffer](t)(d.Alloc(4096))
		defer dst.Free()
		busy := must[*Busy](t)(d.BusyDefaultStream(busyFor))
		for i, s := range streams {
			if err := errors.Join(s.CopyIn(dst, 0, make([]byte, 4096)), s.Sync()); err != nil {
				t.Fatal(err)
			}
			if !stillBusy(t, busy) {
				t.Fatalf("stream %d waited for the busy default stream", i)
			}
		}
		if err := busy.Wait(); err != nil {
			t.Fatal(err)
		}
		t.Logf("streams finished their copies beside %v of %s", busy.Planned, busy.Method)
	})
}

// TestQueueProbeControls: without the probe the first stream shares the
// default stream's queue (so TestQueueProbe can fail), and with one
// hardware queue NewStream gives up with a clear error.
func TestQueueProbeControls(t *testing.T) {
	t.Setenv("GPU_MAX_HW_QUEUES", "4")
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4")
	standins(t, func(t *testing.T, b backend) {
		t.Run("no probe", func(t *testing.T) {
			d := b.open(t, func(o *Options) { o.NoStreamProbe = true })
			first := closing(t, must[*Stream](t)(d.NewStream())) // shares queue 0
			busy := must[*Busy](t)(d.BusyDefaultStream(busyFor))
			if err := first.Sync(); err != nil {
				t.Fatal(err)
			}
			if stillBusy(t, busy) {
				t.Fatal("the first stream did not share the default stream's queue: the model is wrong")
			}
		})
		t.Run("every stream shared", func(t *testing.T) {
			t.Setenv("GPU_MAX_HW_QUEUES", "1")
			t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
			d := b.open(t)
			_, err := d.NewStream()
			if !errors.Is(err, ErrSharedQueue) || !strings.Contains(err.Error(), "GPU_MAX_HW_QUEUES") {
				t.Fatalf("NewStream with one hardware queue: %v, want ErrSharedQueue naming GPU_MAX_HW_QUEUES", err)
			}
			if d.ReplacedStreams() != maxStreamTries {
				t.Fatalf("replaced %d, want %d", d.ReplacedStreams(), maxStreamTries)
			}
		})
	})
}

// TestNoAllocs: copies, syncs, events and the stager make no allocation.
func TestNoAllocs(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		d := b.open(t)
		s := closing(t, must[*Stream](t)(d.NewStream()))
		ev := closing(t, must[*Event](t)(d.NewEvent()))
		st := closing(t, must[*Stager](t)(s.NewStager(16<<10)))
		src := must[*Pinned](t)(d.AllocPinned(3072))
		defer src.Close()
		dst := must[*Buffer](t)(d.Alloc(1 << 20))
		defer dst.Free()
		back := make([]byte, 3072)
		cases := []struct {
			name string
			f    func() error
		}{
			{"CopyIn+Sync", func() error { return firstErr(s.CopyIn(dst, 0, src.Bytes()), s.Sync()) }},
			{"Record+Sync", func() error { return firstErr(ev.Record(s), ev.Sync()) }},
			{"Done", func() error { _, err := ev.Done(); return err }},
			{"WaitEvent", func() error { return s.WaitEvent(ev) }},
			{"ReadBack", func() error { return s.ReadBack(back, dst, 0) }},
			{"Stager", func() error {
				buf, err := st.Next()
				if err != nil {
					return err
				}
				return firstErr(st.Send(dst, 4096, len(buf)), st.Wait())
			}},
		}
		for _, c := range cases {
			var err error
			allocs := testing.AllocsPerRun(100, func() { err = firstErr(err, c.f()) })
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if allocs != 0 {
				t.Errorf("%s: %v allocations per call, want 0", c.name, allocs)
			}
		}
	})
}

// firstErr returns a if it is not nil, else b (without allocating).
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
