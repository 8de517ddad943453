// Package gpu owns ddstore's device side: GPU memory, streams and events
// through the NVIDIA driver API (libcuda.so.1) or HIP (libamdhip64.so),
// both opened at run time with dlopen. No CUDA or ROCm is needed to build,
// and a program that embeds it starts on any machine: without a driver,
// Open returns an error matching ErrNoDriver that names the libraries
// tried and what to install; without the device asked for, ErrNoDevice.
//
// # What it owns
//
//   - Loading (cgpu.go, ddgpu.c: the one cgo boundary). Tables of function
//     pointers with hand-declared prototypes and exact versioned symbol
//     names (cuMemAlloc_v2, cuMemcpyHtoDAsync_v2, cuStreamDestroy_v2, ...;
//     never the _ptsz/_ptds/_spt per-thread-default-stream variants). A
//     library lacking a symbol is a too-old driver (ErrNoDriver naming it).
//   - Device (Open, ParseDevice): name, PCI bus id, compute capability,
//     driver version; the CUDA primary context is retained for its life.
//     Every C entry point makes the device current on the calling OS
//     thread itself and restores the caller's context (CUDA: push/pop of
//     the primary context; HIP: hipSetDevice and back), so goroutines may
//     move between threads and a framework's current device is untouched.
//   - Device memory (Alloc, Wrap for memory owned elsewhere) and pinned host
//     memory (Register for off-heap memory such as shards, AllocPinned):
//     registration is done once and kept, never per call.
//   - Streams (NewStream): non-blocking, one per reader, so a reader's
//     copies never queue behind training kernels on the legacy default
//     stream. NewStream also probes each new stream behind a busy default
//     stream and replaces one that shares the default stream's hardware
//     queue (HIP: GPU_MAX_HW_QUEUES, default 4; every 4th stream collides).
//     The probe is exercised here against a stand-in HIP library that
//     models the queues; it has not been run on real AMD hardware.
//   - Events (NewEvent): blocking-sync, timing disabled. Stream.Sync
//     records the stream's own event and waits on it, so a wait covers
//     exactly that stream's work. A wait polls the event for up to
//     Options.SpinWait (100 µs), where a batch's copy usually ends, then
//     sleeps instead of spinning a core.
//     Device.Sync is the context-wide synchronise the seed did per call,
//     kept for comparison (gpu.sync: device).
//   - Copies: Stream.CopyIn (host to device, asynchronous from pinned
//     memory), Stream.ReadBack (device to host, waits), and Stager, two
//     pinned halves per reader so that filling one overlaps the copy of
//     the other. No allocation per copy, sync or record.
//   - BusyDefaultStream: keeps the legacy default stream busy, as training
//     does, with a PTX spin kernel (%globaltimer loop, cuModuleLoadData)
//     or, failing that and on HIP, memsets. Used by the stream probe, the
//     tests and the benchmarks.
//
// Concurrency: a Device may be shared; a Stream, its Stager and its events
// belong to one goroutine at a time (one reader). Driver waits have no
// deadline of their own; Event.WaitUntil polls with one.
//
// The package imports nothing of ddstore's. Its tests run against small
// stand-in libraries that package gputest builds (host memory as device memory,
// one worker thread per hardware queue); with DDSTORE_GPU_REAL=1 the same
// tests run against the real driver (examples/gpu/check.sh).
package gpu
