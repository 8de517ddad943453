// Command libddstore is the C ABI of the ddstore engine: built with
// go build -buildmode=c-shared it is libddstore.so, the one library (one Go
// runtime per process) that the Python package ddstore loads with ctypes
// and that C or C++ programs link against ddstore.h. It owns the handles
// (runtime/cgo.Handle) that stand for stores, loaders, epochs, batch
// leases and pending calls, the mapping of engine errors onto the
// DDS_ERR_* codes, and the slicing of every wait for other ranks so that
// a caller can handle signals between slices. It never keeps a pointer
// that C passed in past the call (or the started operation) and never
// hands C a pointer into the Go heap.
package main

/*
#cgo CFLAGS: -I${SRCDIR}
#define DDS_NO_PROTOTYPES
#include "ddstore.h"
#include <string.h>
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/cgo"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/engine"
	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/fault"
)

func main() {}

// ---- errors ----

// errInvalid is the class of bad arguments found here (handles, flags).
var errInvalid = fault.ErrInvalid

//go:generate go run ./gen

// codeOf is err's DDS_ERR_* code: its class in fault.Classes (the header's
// codes are generated from the same list). A loader error of no other
// class is a bad argument or option.
func codeOf(err error) int {
	code := fault.CodeOf(err)
	if code == fault.CodeOther && errors.Is(err, engine.ErrLoader) {
		code = fault.CodeOf(fault.ErrInvalid)
	}
	return code
}

// errorNames holds dds_error_name's strings, made once and never freed.
var errorNames sync.Map // int → *C.char

//export dds_error_name
func dds_error_name(code C.int) *C.char {
	name := fault.ClassName(int(code))
	if name == "" {
		return nil
	}
	if p, ok := errorNames.Load(int(code)); ok {
		return p.(*C.char)
	}
	p, _ := errorNames.LoadOrStore(int(code), C.CString(name))
	return p.(*C.char)
}

var rankRe = regexp.MustCompile(`\brank (\d+)`)

// rankOf is the rank an error names: the typed error's, else the first
// "rank N" of its text (the engine's dead-peer errors), else -1.
func rankOf(err error) int {
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Rank() >= 0 {
		return fe.Rank()
	}
	if m := rankRe.FindStringSubmatch(err.Error()); m != nil {
		if r, e := strconv.Atoi(m[1]); e == nil {
			return r
		}
	}
	return -1
}

// fail writes err into e (when not NULL) and returns its code.
func fail(e *C.dds_error, err error) C.int {
	code := codeOf(err)
	if e != nil {
		e.code = C.int32_t(code)
		e.rank = C.int32_t(-1)
		if code == C.DDS_ERR_PEER_DEAD || code == C.DDS_ERR_TIMEOUT {
			e.rank = C.int32_t(rankOf(err))
		}
		msg := err.Error()
		n := min(len(msg), C.DDS_ERRMSG-1)
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&e.msg[0])), C.DDS_ERRMSG)
		copy(buf, msg[:n])
		buf[n] = 0
	}
	return C.int(code)
}

// result turns a Go error into a return code.
func result(e *C.dds_error, err error) C.int {
	switch {
	case err == nil:
		return C.DDS_OK
	case errors.Is(err, engine.ErrNotReady), err == errPending:
		return C.DDS_AGAIN
	case err == io.EOF:
		return C.DDS_EOF
	}
	return fail(e, err)
}

// guard turns a panic (an invalid handle, a Go bug) into DDS_ERR_INVALID
// instead of killing the host process.
func guard(e *C.dds_error, rc *C.int) {
	if p := recover(); p != nil {
		*rc = fail(e, fmt.Errorf("%w: %v", errInvalid, p))
	}
}

// ---- handles ----

type storeObj struct{ s *engine.Store }
type loaderObj struct {
	l     *engine.Loader
	nvars int
}
type epochObj struct{ e *engine.Epoch }

// batchObj is one lease of a batch: its references (Retain/Release
// through this handle); the handle ends with the last.
type batchObj struct {
	b    *engine.Batch
	refs atomic.Int32
}

// call is an operation started by a *_start function.
type call struct {
	done   chan struct{}
	err    error
	result uint64
}

func value[T any](h C.uint64_t, what string) (T, error) {
	var zero T
	if h == 0 {
		return zero, fmt.Errorf("%w: %s handle 0", errInvalid, what)
	}
	v, ok := cgo.Handle(h).Value().(T)
	if !ok {
		return zero, fmt.Errorf("%w: handle %d is not a %s", errInvalid, uint64(h), what)
	}
	return v, nil
}

// run runs f on a goroutine: a call that dds_wait (or await) waits for.
func run(f func() (uint64, error)) *call {
	c := &call{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer func() {
			if p := recover(); p != nil {
				c.err = fmt.Errorf("%w: %v", errInvalid, p)
			}
		}()
		c.result, c.err = f()
	}()
	return c
}

// await waits up to sliceMs for c to finish (until it does when sliceMs
// < 0); false when the slice ran out first.
func (c *call) await(sliceMs C.int32_t) bool {
	select {
	case <-c.done:
		return true
	default:
	}
	switch {
	case sliceMs == 0:
		return false
	case sliceMs < 0:
		<-c.done
		return true
	}
	t := time.NewTimer(time.Duration(sliceMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// start runs f on a goroutine and hands back a call handle for dds_wait.
func start(out *C.uint64_t, f func() (uint64, error)) error {
	if out == nil {
		return fmt.Errorf("%w: NULL call pointer", errInvalid)
	}
	*out = C.uint64_t(cgo.NewHandle(run(f)))
	return nil
}

// on runs f on the object behind handle h (what names its kind), turning
// its error, a bad handle or a panic into a return code.
func on[T any](h C.uint64_t, what string, e *C.dds_error, f func(T) error) (rc C.int) {
	defer guard(e, &rc)
	v, err := value[T](h, what)
	if err == nil {
		err = f(v)
	}
	return result(e, err)
}

// onStore is on for a store handle.
func onStore(h C.uint64_t, e *C.dds_error, f func(*engine.Store) error) C.int {
	return on(h, "store", e, func(o *storeObj) error { return f(o.s) })
}

// startOn starts f on the store behind h as a pending call.
func startOn(h C.uint64_t, out *C.uint64_t, e *C.dds_error, f func(*engine.Store) error) C.int {
	return onStore(h, e, func(s *engine.Store) error {
		return start(out, func() (uint64, error) { return 0, f(s) })
	})
}

//export dds_wait
func dds_wait(h C.uint64_t, sliceMs C.int32_t, res *C.uint64_t, e *C.dds_error) (rc C.int) {
	defer guard(e, &rc)
	c, err := value[*call](h, "call")
	if err != nil {
		return fail(e, err)
	}
	if !c.await(sliceMs) {
		return C.DDS_AGAIN
	}
	cgo.Handle(h).Delete()
	if res != nil {
		*res = C.uint64_t(c.result)
	}
	return result(e, c.err)
}

//export dds_handle_free
func dds_handle_free(h C.uint64_t) (rc C.int) {
	defer guard(nil, &rc)
	if h != 0 {
		cgo.Handle(h).Delete()
	}
	return C.DDS_OK
}

// ---- store ----

type bootOpts struct {
	Method     string `json:"method"`
	Addr       string `json:"addr"`
	Dir        string `json:"dir"`
	Token      string `json:"token"`
	Rank       *int   `json:"rank"`
	World      int    `json:"world"`
	LocalRank  int    `json:"local_rank"`
	LocalWorld int    `json:"local_world"`
	Job        string `json:"job"`
	TimeoutMs  int64  `json:"timeout_ms"`
}

type openOpts struct {
	Config          string    `json:"config"`
	NodeMode        string    `json:"node_mode"`
	Provider        string    `json:"provider"`
	Iface           string    `json:"iface"`
	ReadMode        string    `json:"read_mode"`
	Width           int       `json:"width"`
	TimeoutMs       int64     `json:"timeout_ms"`
	FabricTimeoutMs int64     `json:"fabric_timeout_ms"`
	Telemetry       *bool     `json:"telemetry"`
	TelemetryDir    string    `json:"telemetry_dir"`
	ShardDir        string    `json:"shard_dir"`
	Bootstrap       *bootOpts `json:"bootstrap"`
}

func storeOptions(js string) (engine.Options, error) {
	var o openOpts
	if js != "" {
		dec := json.NewDecoder(strings.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return engine.Options{}, fmt.Errorf("%w: open options: %v", errInvalid, err)
		}
	}
	c, err := engine.LoadConfig(o.Config)
	if err != nil {
		return engine.Options{}, err
	}
	so := c.StoreOptions()
	if o.NodeMode != "" {
		so.NodeMode = o.NodeMode
	}
	if o.Provider != "" {
		so.Fabric.Provider = o.Provider
	}
	if o.Iface != "" {
		so.Fabric.Domain = o.Iface
	}
	if o.ReadMode != "" {
		so.ReadMode = o.ReadMode
	}
	if o.Width != 0 {
		so.Width = o.Width
	}
	if o.TimeoutMs > 0 {
		so.Timeout = time.Duration(o.TimeoutMs) * time.Millisecond
		so.Bootstrap.Timeout = so.Timeout
	}
	if o.FabricTimeoutMs > 0 {
		so.Fabric.Timeout = time.Duration(o.FabricTimeoutMs) * time.Millisecond
	}
	if o.Telemetry != nil {
		so.DisableTelemetry = !*o.Telemetry
	}
	if o.TelemetryDir != "" {
		so.TelemetryDir = o.TelemetryDir
	}
	if o.ShardDir != "" {
		so.ShardDir = o.ShardDir
	}
	if b := o.Bootstrap; b != nil {
		if b.Method != "" {
			so.Bootstrap.Method = b.Method
		}
		if b.Addr != "" {
			so.Bootstrap.Addr = b.Addr
		}
		if b.Dir != "" {
			so.Bootstrap.Dir = b.Dir
		}
		if b.Token != "" {
			so.Bootstrap.Token = b.Token
		}
		if b.TimeoutMs > 0 {
			so.Bootstrap.Timeout = time.Duration(b.TimeoutMs) * time.Millisecond
		}
		if b.World > 0 {
			r := 0
			if b.Rank != nil {
				r = *b.Rank
			}
			so.Bootstrap.Env = bootstrap.Env{Rank: r, World: b.World, LocalRank: b.LocalRank,
				LocalWorld: b.LocalWorld, Launcher: "python", Job: b.Job}
		}
	}
	return so, nil
}

//export dds_open_start
func dds_open_start(opts *C.char, out *C.uint64_t, e *C.dds_error) (rc C.int) {
	defer guard(e, &rc)
	js := ""
	if opts != nil {
		js = C.GoString(opts)
	}
	so, err := storeOptions(js)
	if err == nil {
		err = start(out, func() (uint64, error) {
			s, err := engine.Open(so)
			if err != nil {
				return 0, err
			}
			ender.track(s)
			return uint64(cgo.NewHandle(&storeObj{s: s})), nil
		})
	}
	return result(e, err)
}

// cstr views a C string without copying; valid during the call only.
func cstr(p *C.char) string {
	if p == nil {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(p)), int(C.strlen(p)))
}

// cbytes views C memory as a slice; valid during the call (or started op).
func cbytes(p unsafe.Pointer, n C.int64_t) ([]byte, error) {
	return cslice[byte](p, n, "length", "buffer of %d bytes")
}

func cints(p *C.int64_t, n C.int64_t) ([]int64, error) {
	return cslice[int64](unsafe.Pointer(p), n, "count", "array of %d entries")
}

// cslice views n Ts of C memory at p as a slice; an error names a negative
// n as its count word, or a NULL p as what (with n).
func cslice[T any](p unsafe.Pointer, n C.int64_t, count, what string) ([]T, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("%w: negative %s %d", errInvalid, count, int64(n))
	case n == 0:
		return nil, nil
	case p == nil:
		return nil, fmt.Errorf("%w: NULL "+what, errInvalid, int64(n))
	}
	return unsafe.Slice((*T)(p), int(n)), nil
}

//export dds_close_start
func dds_close_start(h C.uint64_t, out *C.uint64_t, e *C.dds_error) C.int {
	return startOn(h, out, e, func(s *engine.Store) error {
		defer ender.untrack(s) // closed even when Close fails
		return s.Close()
	})
}

// dds_abandon removes the store's telemetry segment and shard files
// without meeting the other ranks (engine.Store.Abandon): for a process
// ending by an error or an interrupt. The handle must still be freed.
//
//export dds_abandon
func dds_abandon(h C.uint64_t, e *C.dds_error) C.int {
	return onStore(h, e, func(s *engine.Store) error {
		defer ender.untrack(s)
		return s.Abandon()
	})
}

// ---- ending on signals ----

// ender ends this process on the signals dds_end_on_signals took: it
// abandons every store of this library still open (their telemetry
// segments and shard files removed), says so in one line on stderr, and
// ends by the signal (engine.EndBySignal), all on a goroutine of its own
// within a few milliseconds, whatever the host's threads are doing.
var ender = &signalEnder{stores: map[*engine.Store]struct{}{}}

type signalEnder struct {
	mu     sync.Mutex
	stores map[*engine.Store]struct{} // open, in this process
	taken  int                        // DDS_END_* flags taken
	ch     chan os.Signal
}

func (g *signalEnder) track(s *engine.Store) {
	g.mu.Lock()
	g.stores[s] = struct{}{}
	g.mu.Unlock()
}

func (g *signalEnder) untrack(s *engine.Store) {
	g.mu.Lock()
	delete(g.stores, s)
	g.mu.Unlock()
}

// endFlags maps DDS_END_* flags to their signals.
var endFlags = []struct {
	flag int
	sig  unix.Signal
}{{C.DDS_END_SIGTERM, unix.SIGTERM}, {C.DDS_END_SIGINT, unix.SIGINT}}

// signalsToTake is the decision of dds_end_on_signals: of the signals
// asked for (DDS_END_* flags), SIGTERM always, SIGINT only where the
// launcher SIGKILLs the process right after it forwards Ctrl-C (srun,
// bootstrap.KilledAfterInterrupt): elsewhere the caller's own handling
// (Python's KeyboardInterrupt) has time to run.
func signalsToTake(asked int, killedAfterInterrupt bool) int {
	take := asked & C.DDS_END_SIGTERM
	if killedAfterInterrupt {
		take |= asked & C.DDS_END_SIGINT
	}
	return take
}

// take starts handling the signals of flags (once each); it returns every
// flag taken so far.
func (g *signalEnder) take(flags int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sigs []os.Signal
	for _, f := range endFlags {
		if flags&f.flag != 0 && g.taken&f.flag == 0 {
			sigs = append(sigs, f.sig)
			g.taken |= f.flag
		}
	}
	if len(sigs) > 0 {
		if g.ch == nil {
			g.ch = make(chan os.Signal, 1)
			go g.end()
		}
		signal.Notify(g.ch, sigs...)
	}
	return g.taken
}

// end waits for a signal taken, then ends the process by it.
func (g *signalEnder) end() {
	sig := (<-g.ch).(unix.Signal)
	g.mu.Lock()
	who, n := fmt.Sprintf("pid %d", os.Getpid()), 0
	for s := range g.stores {
		if n == 0 {
			who = fmt.Sprintf("rank %d of %d", s.Rank(), s.World())
		}
		if s.Abandon() == nil {
			n++
		}
	}
	g.mu.Unlock()
	_, _ = os.Stderr.WriteString(endMessage(who, sig, n)) // one write: whole among the ranks' output
	engine.EndBySignal(sig)
}

// endMessage is the line ender writes before the process ends by sig,
// having abandoned n stores.
func endMessage(who string, sig unix.Signal, n int) string {
	what := "no store open"
	switch {
	case n == 1:
		what = "store abandoned (segment and shard files removed)"
	case n > 1:
		what = fmt.Sprintf("%d stores abandoned (segments and shard files removed)", n)
	}
	why := unix.SignalName(sig)
	if sig == unix.SIGINT {
		why = "Ctrl-C in a Slurm step (srun SIGKILLs it right after)"
	}
	return fmt.Sprintf("ddstore: %s: %s: %s, ending by %s now\n", who, why, what, unix.SignalName(sig))
}

// dds_end_on_signals: see ddstore.h.
//
//export dds_end_on_signals
func dds_end_on_signals(flags C.int) C.int {
	return C.int(ender.take(signalsToTake(int(flags), bootstrap.KilledAfterInterrupt())))
}

// dds_exit_interrupted: engine.ExitUnderHydra with the interrupt's code.
//
//export dds_exit_interrupted
func dds_exit_interrupted() {
	engine.ExitUnderHydra(engine.InterruptExitCode)
}

//export dds_add_start
func dds_add_start(h C.uint64_t, name *C.char, dt C.int32_t, rowElems C.int64_t, data unsafe.Pointer, n C.int64_t,
	out *C.uint64_t, e *C.dds_error) C.int {
	nm := C.GoString(name)
	b, err := cbytes(data, n)
	if err != nil {
		return fail(e, err)
	}
	return startOn(h, out, e, func(s *engine.Store) error { return s.Add(nm, engine.DType(dt), int(rowElems), b) })
}

//export dds_init_start
func dds_init_start(h C.uint64_t, name *C.char, dt C.int32_t, rowElems, nLocal C.int64_t,
	out *C.uint64_t, e *C.dds_error) C.int {
	nm := C.GoString(name)
	return startOn(h, out, e, func(s *engine.Store) error {
		return s.Init(nm, engine.DType(dt), int(rowElems), int64(nLocal))
	})
}

//export dds_free_start
func dds_free_start(h C.uint64_t, name *C.char, out *C.uint64_t, e *C.dds_error) C.int {
	nm := C.GoString(name)
	return startOn(h, out, e, func(s *engine.Store) error { return s.Free(nm) })
}

//export dds_barrier_start
func dds_barrier_start(h C.uint64_t, out *C.uint64_t, e *C.dds_error) C.int {
	return startOn(h, out, e, (*engine.Store).Barrier)
}

//export dds_info
func dds_info(h C.uint64_t, out *C.int32_t, e *C.dds_error) C.int {
	return onStore(h, e, func(s *engine.Store) error {
		o := unsafe.Slice(out, 4)
		o[0], o[1], o[2], o[3] = C.int32_t(s.Rank()), C.int32_t(s.World()), C.int32_t(s.Width()), C.int32_t(s.LocalRank())
		return nil
	})
}

//export dds_query
func dds_query(h C.uint64_t, name *C.char, out *C.char, capacity C.int64_t, e *C.dds_error) C.int {
	return onStore(h, e, func(s *engine.Store) error {
		info, err := s.Query(C.GoString(name))
		if err != nil {
			return err
		}
		js, _ := json.Marshal(map[string]any{"name": info.Name, "dtype": info.DType.String(), "dtype_code": int(info.DType),
			"row_elems": info.RowElems, "row_bytes": info.RowBytes, "global_rows": info.GlobalRows,
			"local_rows": info.LocalRows, "local_start": info.LocalStart, "shards": info.Shards,
			"group": info.Group, "group_ranks": info.GroupRanks})
		if int64(len(js)) >= int64(capacity) {
			return fmt.Errorf("%w: query of %q needs %d bytes, buffer has %d", errInvalid, info.Name, len(js)+1, int64(capacity))
		}
		buf := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(capacity))
		copy(buf, js)
		buf[len(js)] = 0
		return nil
	})
}

//export dds_update
func dds_update(h C.uint64_t, name *C.char, rows unsafe.Pointer, n, off C.int64_t, e *C.dds_error) C.int {
	return onStore(h, e, func(s *engine.Store) error {
		b, err := cbytes(rows, n)
		if err != nil {
			return err
		}
		return s.Update(cstr(name), b, int64(off))
	})
}

// errPending: a read still running after its first slice (DDS_AGAIN,
// with a call handle for dds_wait).
var errPending = errors.New("ddstore: read pending")

// startRead runs read on the store behind h into dst (n bytes at C
// memory dst), unless argErr (the caller's check of its other arguments)
// is not nil. With sliceMs < 0, or when no read of the store can wait on
// the fabric (every shard is mapped: memcpy only), it runs in the
// caller's thread. Otherwise it runs on a goroutine and the caller waits
// up to sliceMs for it: a read done by then returns its result; one still
// running returns DDS_AGAIN and a call handle in *out for dds_wait, and
// goes on using name, the index arrays and dst until dds_wait returns
// something else.
func startRead(h C.uint64_t, name *C.char, dst unsafe.Pointer, n C.int64_t, argErr error, sliceMs C.int32_t,
	out *C.uint64_t, e *C.dds_error, read func(s *engine.Store, name string, dst []byte) error) C.int {
	if out != nil {
		*out = 0
	}
	d, err := cbytes(dst, n)
	if err = errors.Join(argErr, err); err != nil {
		return fail(e, err)
	}
	return onStore(h, e, func(s *engine.Store) error {
		if sliceMs < 0 || s.Fabric() == nil {
			return read(s, cstr(name), d)
		}
		if out == nil {
			return fmt.Errorf("%w: NULL call pointer", errInvalid)
		}
		nm := C.GoString(name) // the caller's string may go before the read ends
		c := run(func() (uint64, error) { return 0, read(s, nm, d) })
		if c.await(sliceMs) {
			return c.err
		}
		*out = C.uint64_t(cgo.NewHandle(c))
		return errPending
	})
}

//export dds_get_start
func dds_get_start(h C.uint64_t, name *C.char, startRow, count C.int64_t, dst unsafe.Pointer, n C.int64_t,
	sliceMs C.int32_t, out *C.uint64_t, e *C.dds_error) C.int {
	return startRead(h, name, dst, n, nil, sliceMs, out, e, func(s *engine.Store, nm string, d []byte) error {
		return s.Get(nm, int64(startRow), int64(count), d)
	})
}

//export dds_get_batch_start
func dds_get_batch_start(h C.uint64_t, name *C.char, idx *C.int64_t, ni C.int64_t, dst unsafe.Pointer, n C.int64_t,
	sliceMs C.int32_t, out *C.uint64_t, e *C.dds_error) C.int {
	ix, err := cints(idx, ni)
	return startRead(h, name, dst, n, err, sliceMs, out, e, func(s *engine.Store, nm string, d []byte) error {
		return s.GetBatch(nm, ix, d)
	})
}

//export dds_get_ranges_start
func dds_get_ranges_start(h C.uint64_t, name *C.char, starts, counts *C.int64_t, nr C.int64_t, dst unsafe.Pointer,
	n C.int64_t, sliceMs C.int32_t, out *C.uint64_t, e *C.dds_error) C.int {
	st, err := cints(starts, nr)
	ct, err2 := cints(counts, nr)
	return startRead(h, name, dst, n, errors.Join(err, err2), sliceMs, out, e,
		func(s *engine.Store, nm string, d []byte) error { return s.GetRanges(nm, st, ct, d) })
}

//export dds_get
func dds_get(h C.uint64_t, name *C.char, startRow, count C.int64_t, dst unsafe.Pointer, n C.int64_t, e *C.dds_error) C.int {
	return dds_get_start(h, name, startRow, count, dst, n, -1, nil, e)
}

//export dds_get_batch
func dds_get_batch(h C.uint64_t, name *C.char, idx *C.int64_t, ni C.int64_t, dst unsafe.Pointer, n C.int64_t, e *C.dds_error) C.int {
	return dds_get_batch_start(h, name, idx, ni, dst, n, -1, nil, e)
}

//export dds_get_ranges
func dds_get_ranges(h C.uint64_t, name *C.char, starts, counts *C.int64_t, nr C.int64_t, dst unsafe.Pointer, n C.int64_t, e *C.dds_error) C.int {
	return dds_get_ranges_start(h, name, starts, counts, nr, dst, n, -1, nil, e)
}

// ---- loader ----

type loaderOpts struct {
	Vars          []string `json:"vars"`
	BatchSize     int      `json:"batch_size"`
	Seed          int64    `json:"seed"`
	Shuffle       bool     `json:"shuffle"`
	DropLast      bool     `json:"drop_last"`
	Workers       int      `json:"workers"`
	Prefetch      int      `json:"prefetch"`
	BatchGet      *bool    `json:"batch_get"`
	FastCollate   *bool    `json:"fast_collate"`
	ThreadReaders *bool    `json:"thread_readers"`
	Replicas      int      `json:"replicas"`
	Rank          int      `json:"rank"`
	TimeoutMs     int64    `json:"timeout_ms"`
}

func orTrue(b *bool) bool { return b == nil || *b }

//export dds_loader_new
func dds_loader_new(h C.uint64_t, opts *C.char, out *C.uint64_t, e *C.dds_error) C.int {
	return onStore(h, e, func(s *engine.Store) error {
		var o loaderOpts
		dec := json.NewDecoder(strings.NewReader(C.GoString(opts)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return fmt.Errorf("%w: loader options: %v", errInvalid, err)
		}
		if len(o.Vars) > C.DDS_MAX_VARS {
			return fmt.Errorf("%w: %d variables, at most %d per loader", errInvalid, len(o.Vars), C.DDS_MAX_VARS)
		}
		l, err := s.NewLoader(engine.LoaderOptions{Vars: o.Vars, BatchSize: o.BatchSize, Seed: o.Seed, Shuffle: o.Shuffle,
			DropLast: o.DropLast, Workers: o.Workers, Prefetch: o.Prefetch, BatchGet: orTrue(o.BatchGet),
			FastCollate: orTrue(o.FastCollate), ThreadReaders: orTrue(o.ThreadReaders), Replicas: o.Replicas,
			Rank: o.Rank, Timeout: time.Duration(o.TimeoutMs) * time.Millisecond})
		if err != nil {
			return err
		}
		*out = C.uint64_t(cgo.NewHandle(&loaderObj{l: l, nvars: len(o.Vars)}))
		return nil
	})
}

//export dds_loader_len
func dds_loader_len(h C.uint64_t, out *C.int64_t, e *C.dds_error) C.int {
	return on(h, "loader", e, func(lo *loaderObj) error {
		o := unsafe.Slice(out, 3)
		o[0], o[1], o[2] = C.int64_t(lo.l.Len()), C.int64_t(lo.l.Batches()), C.int64_t(lo.l.PoolSize())
		return nil
	})
}

//export dds_loader_close
func dds_loader_close(h C.uint64_t, e *C.dds_error) C.int {
	return on(h, "loader", e, func(lo *loaderObj) error { return lo.l.Close() })
}

//export dds_loader_epoch
func dds_loader_epoch(h C.uint64_t, epoch C.int64_t, idx *C.int64_t, n C.int64_t, out *C.uint64_t, e *C.dds_error) C.int {
	return on(h, "loader", e, func(lo *loaderObj) error {
		var ep *engine.Epoch
		var err error
		if n < 0 {
			ep, err = lo.l.Epoch(int(epoch))
		} else {
			var ix []int64
			if ix, err = cints(idx, n); err == nil {
				ep, err = lo.l.EpochIndices(int(epoch), ix) // copies ix
			}
		}
		if err != nil {
			return err
		}
		*out = C.uint64_t(cgo.NewHandle(&epochObj{e: ep}))
		return nil
	})
}

//export dds_epoch_next
func dds_epoch_next(h C.uint64_t, sliceMs C.int32_t, out *C.dds_batch, e *C.dds_error) C.int {
	return on(h, "epoch", e, func(eo *epochObj) error {
		if out == nil {
			return fmt.Errorf("%w: NULL batch", errInvalid)
		}
		b, err := eo.e.NextWithin(max(time.Duration(sliceMs)*time.Millisecond, time.Millisecond))
		if err != nil {
			return err // ErrNotReady: DDS_AGAIN; io.EOF: DDS_EOF
		}
		rows := len(b.Indices)
		if int64(out.indices_cap) < int64(rows) || (rows > 0 && out.indices == nil) {
			b.Release()
			return fmt.Errorf("%w: indices buffer of %d entries for a batch of %d rows", errInvalid, int64(out.indices_cap), rows)
		}
		copy(unsafe.Slice((*int64)(unsafe.Pointer(out.indices)), rows), b.Indices)
		bo := &batchObj{b: b}
		bo.refs.Store(1)
		out.batch = C.uint64_t(cgo.NewHandle(bo))
		out.epoch, out.number, out.rows = C.int64_t(b.Epoch), C.int64_t(b.Number), C.int64_t(rows)
		out.nvars = C.int32_t(len(b.Data))
		for v, d := range b.Data {
			out.data[v] = unsafe.Pointer(unsafe.SliceData(d)) // off-heap (fabric.Alloc)
			out.nbytes[v] = C.int64_t(len(d))
		}
		return nil
	})
}

//export dds_epoch_drain
func dds_epoch_drain(h C.uint64_t, out *C.int64_t, e *C.dds_error) C.int {
	return on(h, "epoch", e, func(eo *epochObj) error {
		t0 := time.Now()
		var batches, rows int64
		for {
			b, err := eo.e.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			batches++
			rows += int64(len(b.Indices))
			b.Release()
		}
		o := unsafe.Slice(out, 3)
		o[0], o[1], o[2] = C.int64_t(batches), C.int64_t(rows), C.int64_t(time.Since(t0))
		return nil
	})
}

//export dds_epoch_stats
func dds_epoch_stats(h C.uint64_t, out *C.int64_t, e *C.dds_error) C.int {
	return on(h, "epoch", e, func(eo *epochObj) error {
		st := eo.e.Stats()
		o := unsafe.Slice(out, 4)
		o[0], o[1], o[2], o[3] = C.int64_t(st.Wait), C.int64_t(st.Step), C.int64_t(st.Batches), C.int64_t(st.Rows)
		return nil
	})
}

//export dds_epoch_close
func dds_epoch_close(h C.uint64_t, e *C.dds_error) C.int {
	return on(h, "epoch", e, func(eo *epochObj) error { eo.e.Close(); return nil })
}

// adjust adds delta (+1 or -1) to the lease's references, refusing a
// lease that has none left; the last release ends handle h.
func (bo *batchObj) adjust(h C.uint64_t, delta int32) error {
	for {
		n := bo.refs.Load()
		if n <= 0 {
			return fmt.Errorf("%w: batch lease already released", errInvalid)
		}
		if !bo.refs.CompareAndSwap(n, n+delta) {
			continue
		}
		if delta > 0 {
			bo.b.Retain()
			return nil
		}
		if n == 1 {
			cgo.Handle(h).Delete()
		}
		bo.b.Release()
		return nil
	}
}

//export dds_batch_retain
func dds_batch_retain(h C.uint64_t, e *C.dds_error) C.int {
	return on(h, "batch", e, func(bo *batchObj) error { return bo.adjust(h, 1) })
}

//export dds_batch_release
func dds_batch_release(h C.uint64_t, e *C.dds_error) C.int {
	return on(h, "batch", e, func(bo *batchObj) error { return bo.adjust(h, -1) })
}
