// Package fabric owns ddstore's transport: libfabric through cgo. It selects
// a provider and domain, exports memory for one-sided remote reads, and reads
// other processes' exported memory with fi_read, singly or in batches.
//
// # What it owns
//
//   - Provider selection (Open): fi_getinfo for FI_EP_RDM endpoints with
//     FI_RMA|FI_READ|FI_REMOTE_READ|FI_MSG|FI_TAGGED, accepting the mr_mode
//     bits FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY and
//     FI_MR_ENDPOINT, the FI_CONTEXT/FI_CONTEXT2 mode bits, and no data
//     progress requirement (asking for FI_PROGRESS_AUTO drops shm). The list
//     is walked here, because some providers ignore the domain hint. With
//     Options.Provider empty the default order is cxi, verbs;ofi_rxm,
//     tcp;ofi_rxm, shm. An unknown provider or domain is an error listing
//     what is available (fault.ErrNoProvider, fault.ErrNoDomain).
//   - Memory outside the Go heap (Alloc: mmap, huge pages where available)
//     and its export (Fabric.Export: FI_REMOTE_READ only; provider key with
//     FI_MR_PROV_KEY, else a unique requested key; Base is the virtual
//     address only with FI_MR_VIRT_ADDR).
//   - libfabric itself, loaded at run time (dlopen of libfabric.so.1, six
//     real symbols; dd_lib.c): without it Open fails with fault.ErrNoLibrary
//     saying what to install, and everything else still works.
//   - Readers (Fabric.NewReader): one per goroutine, each with its own
//     endpoint, CQ and AV on the process's one domain (fi_getinfo is asked
//     for FI_THREAD_SAFE, then FI_THREAD_COMPLETION); a reader gets its own
//     domain only at weaker threading, on shm (see the watchdog below),
//     and on tcp (closing a reader's endpoint after a peer was killed
//     raced the provider's progress of the shared domain: fabric.go).
//     ReadBatch keeps up to Options.Window reads in flight (default 128,
//     clamped to the tx queue size), drains the CQ on -FI_EAGAIN, reports
//     per-read errors from the error CQ with fi_strerror/fi_cq_strerror text
//     and the peer's rank, and never outlives its deadline: when the
//     deadline passes with reads in flight the endpoint is closed (which
//     cancels them) before returning, and recreated on the next call.
//     Destinations may be Go memory (pinned for the call) or off-heap. Local
//     registration of destinations happens only when the provider requires
//     FI_MR_LOCAL, through a bounded per-reader cache. A batch makes no heap
//     allocation; posting and CQ draining run in one cgo call per chunk.
//     On shm, whose fi_read can spin forever on a stopped peer's lock, calls
//     run under a watchdog (dd_watchdog.c) that abandons a call still inside
//     the provider 250ms past its deadline: fault.ErrTimeout naming the peer, and
//     the reader is quarantined (QuarantinedReaders). An endpoint whose close
//     fails keeps its destinations pinned and registered (LeakedEndpoints).
//     The shm region files of such readers (never closed) are removed by
//     Fabric.Close, so a job that recovered from a stuck peer leaves none.
//     shm names each endpoint's region after the process's pid; a killed
//     rank leaves its regions, and an endpoint of a later process given
//     that pid takes the next name instead (dd_endpoint, dd_info.c).
//   - Errors: every error is a *fault.Error with the libfabric call, the
//     peer, Side Local or Remote and an Errno carrying fi_strerror's text.
//   - Gather reads (Reader.ReadGather) for software-RMA providers
//     (Info.SoftwareRMA: tcp, sockets, udp, net), where every fi_read is a
//     message the target's CPU answers anyway: the reader sends each peer one
//     tagged request per round (its endpoint name, a request id, the job's
//     gather key and the key/address/length list, at most
//     Options.GatherMaxBytes of rows, default 2 MiB, Options.GatherRounds
//     rounds in flight, default 4); a peer with a gather key
//     (Options.GatherKey) drops a request with another key unanswered and
//     counts it (GatherStrangers); its progress thread validates every entry against its exports
//     (unknown key or range outside the region: an error reply naming the
//     entry, fault.ErrRejected), packs the rows into one reply, and the reader
//     copies them from an off-heap, grow-only bounce buffer into the
//     destinations. Same deadline, teardown and zero-allocation rules as
//     ReadBatch; rows larger than a round, and providers with hardware RMA
//     (cxi, verbs) or CMA (shm), use fi_read.
//   - Exchange primitives: Fabric.Address (endpoint name), Reader.AddPeer
//     (fi_av_insert), Export.Key and Export.Base.
//
// # Progress model
//
// Every Fabric owns a "server" endpoint, the one exported memory is reached
// through. Providers here use manual data progress, so a target that makes
// no libfabric calls would never serve a read (tcp) or would fill its
// command queue (shm, 1024 slots). A goroutine locked to its OS thread
// progresses the server endpoint for the Fabric's lifetime: where the CQ
// supports FI_WAIT_FD (tcp;ofi_rxm) it calls fi_trywait and sleeps in poll
// until the provider has work, so an idle rank uses no CPU; where it does
// not (shm) it polls with exponential back-off from 50µs to 2ms (10ms once
// idle for 200ms), reset when a step found work. It never busy-spins. On
// software-RMA providers the same loop serves gather requests: it keeps a few
// tagged receives posted, and answers each request from its CQ completion.
// Readers progress their own endpoints while they wait on their CQ. They
// spin (up to 2ms without a completion) only while few readers of the
// process are inside a batch (at most half the online CPUs, at least 1):
// more spinners would starve the targets' progress threads. Otherwise, and
// after 2ms, a reader whose CQ has a wait fd (tcp;ofi_rxm) calls fi_trywait
// and sleeps on the fd (at most 1ms at a time, never past the deadline);
// without one (shm) it spins, then backs off with sleeps up to 1ms.
//
// Environment variables (DDSTORE_FABRIC, FABRIC_IFACE) are read by package
// configs, the one place that knows them, not here.
package fabric
