package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ddstore/ddstore/fault"

	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fabric"
)

// VarInfo describes a variable as seen by this rank's group.
type VarInfo struct {
	Name       string
	DType      DType
	RowElems   int     // elements per row
	RowBytes   int64   // bytes per row
	GlobalRows int64   // rows of the group's global index space
	LocalRows  int64   // rows in this rank's shard
	LocalStart int64   // global index of this rank's first row
	Shards     []int64 // prefix offsets: shard of group member i is [Shards[i], Shards[i+1])
	Group      int     // width group index
	GroupRanks []int   // global ranks of the group, in shard order
}

// Var is a handle to one variable. Get and GetBatch on it skip the name
// lookup. A Var is invalid after Free or Close (its calls then fail).
type Var struct {
	s        *Store
	name     string
	dt       DType
	rowElems int
	rowBytes int64
	nLocal   int64
	// lay is where every row is read from (package placement): the home
	// group's shard offsets and ranks, the replicas in failover order, and
	// which ranks' copies are mapped on this node.
	lay    placement.Layout
	global int64         // lay.Rows()
	src    [][]byte      // by rank: its copy of its shard, mapped on this node; nil when read through the fabric
	remote []remoteShard // by rank: its exported copy, read through the fabric
	own    *shardFile
	mapped []*shardFile // same-node peers' shards
	exp    *fabric.Export
	telID  int32 // -1: not in telemetry

	inflight atomic.Int64
	freed    atomic.Bool
	// released is closed once a release deferred by Free's timeout has
	// run; nil unless Free timed out (see Store.Free).
	released chan struct{}

	mu     sync.Mutex // the shared reader (Store-level calls)
	shared *readCtx   // nil when every shard is mapped

	storage   bool         // held by storage-only ranks (storage.go): no shard here
	group     int          // storage variables: the home group's index
	failovers atomic.Int64 // rows served by a replica instead of their owner
}

type remoteShard struct {
	key, base uint64
}

// varMeta is what every rank contributes to a collective on a variable.
type varMeta struct {
	Op       string `json:"op"`
	Name     string `json:"name"`
	DType    DType  `json:"dtype"`
	RowElems int    `json:"elems"`
	RowBytes int64  `json:"rowBytes"`
	NLocal   int64  `json:"n"`
	Path     string `json:"path,omitempty"`
	Key      uint64 `json:"key,omitempty"`
	Base     uint64 `json:"base,omitempty"`
	Err      string `json:"err,omitempty"`
}

// Add creates variable name from each rank's local rows (collective): the
// rows are copied into this rank's shard. len(local) must be a multiple of
// rowElems*dt.Size(). If any rank fails or ranks disagree on the name,
// dtype or row size, every rank returns an error and none keeps the variable.
func (s *Store) Add(name string, dt DType, rowElems int, local []byte) error {
	return s.create("add", name, dt, rowElems, -1, local)
}

// Init creates variable name with nLocalRows zero-filled rows on this rank
// (collective); fill them with Update.
func (s *Store) Init(name string, dt DType, rowElems int, nLocalRows int64) error {
	return s.create("init", name, dt, rowElems, nLocalRows, nil)
}

func (s *Store) create(op, name string, dt DType, rowElems int, nLocal int64, local []byte) error {
	s.collMu.Lock()
	defer s.collMu.Unlock()
	if s.closed.Load() {
		return errf(ErrClosed, opName(op), name, "store closed")
	}
	if s.ex == nil && s.opts.Role == RoleStorage {
		return errStorageCollective()
	}
	s.seq++
	tag := fmt.Sprintf("coll-%d", s.seq)

	me := varMeta{Op: op, Name: name, DType: dt, RowElems: rowElems, RowBytes: int64(rowElems) * int64(dt.Size())}
	var localErr error
	switch {
	case name == "":
		localErr = errf(ErrDType, opName(op), name, "empty variable name")
	case !dt.Valid():
		localErr = errf(ErrDType, opName(op), name, "invalid dtype %d", uint8(dt))
	case rowElems <= 0:
		localErr = errf(ErrDType, opName(op), name, "%d elements per row", rowElems)
	case int64(rowElems) > math.MaxInt64/int64(dt.Size()):
		localErr = errf(ErrDType, opName(op), name, "%d elements of %s per row overflow int64 bytes", rowElems, dt)
	case op == "add" && int64(len(local))%me.RowBytes != 0:
		localErr = errf(ErrDType, opName(op), name, "%d bytes of local data is not a multiple of the row size %d (%d × %s)",
			len(local), me.RowBytes, rowElems, dt)
	case op == "init" && nLocal < 0:
		localErr = errf(ErrIndex, opName(op), name, "%d local rows", nLocal)
	case op == "init" && nLocal > math.MaxInt64/me.RowBytes:
		localErr = errf(ErrIndex, opName(op), name, "%d local rows of %d bytes overflow int64 bytes", nLocal, me.RowBytes)
	case (*s.vars.Load())[name] != nil:
		localErr = errf(ErrExists, opName(op), name, "variable exists")
	}
	if op == "add" && localErr == nil {
		nLocal = int64(len(local)) / me.RowBytes
	}
	me.NLocal = nLocal

	var own *shardFile
	var exp *fabric.Export
	cleanup := func() {
		if exp != nil {
			exp.Close()
		}
		own.close()
	}
	if localErr == nil {
		own, localErr = createShard(s.opts.ShardDir, shardName(s.job, s.rank, s.seq, name), name, nLocal*me.RowBytes)
		if localErr == nil {
			copy(own.data, local)
			me.Path = own.path
			if s.fab != nil {
				exp, localErr = s.fab.Export(own.mem)
				if localErr == nil {
					me.Key, me.Base = exp.Key(), exp.Base()
				} else {
					localErr = &Error{Op: opName(op), Var: name, Side: fault.Local, Detail: fmt.Sprintf("fabric export of %d bytes", len(own.mem)), Err: localErr}
				}
			}
		}
	}
	if localErr != nil {
		me.Err = localErr.Error()
	}
	blobs, err := s.gather(tag, me)
	if err != nil {
		cleanup()
		return wrapf(nil, opName(op), name, err, "exchange")
	}
	metas := make([]varMeta, s.world)
	for r, b := range blobs {
		if err := json.Unmarshal(b, &metas[r]); err != nil {
			cleanup()
			return &Error{Op: opName(op), Var: name, Kind: ErrMismatch, Ranks: []int{r}, Detail: "bad record", Err: err}
		}
	}
	if err := checkAgreement(metas, s.rank, localErr); err != nil {
		cleanup()
		return err
	}

	// Build the variable: map same-node shards, connect the shared reader.
	v := &Var{s: s, name: name, dt: dt, rowElems: rowElems, rowBytes: me.RowBytes, nLocal: nLocal,
		own: own, exp: exp, telID: -1}
	v.lay = placement.Layout{RowBytes: me.RowBytes, Offsets: make([]int64, s.width+1), Home: s.homeRanks(), Self: s.rank}
	v.src = make([][]byte, s.nranks)
	v.remote = make([]remoteShard, s.nranks)
	needFabric := false
	for i := 0; i < s.width; i++ {
		r := s.groupLo + i
		m := metas[r]
		v.lay.Offsets[i+1] = v.lay.Offsets[i] + m.NLocal
		switch {
		case r == s.rank:
			v.src[r] = own.data
		case s.peers[r].sameNode && localErr == nil:
			f, err := openShard(m.Path, r, m.NLocal*m.RowBytes)
			if err != nil {
				localErr = &Error{Op: opName(op), Var: name, Ranks: []int{r}, Side: fault.Local, Detail: "map the peer's shard", Err: err}
				break
			}
			v.mapped = append(v.mapped, f)
			v.src[r] = f.data
		default:
			v.remote[r] = remoteShard{key: m.Key, base: m.Base}
			needFabric = true
		}
	}
	v.global = v.lay.Rows()
	if s.repl.groups > 1 {
		needFabric = v.addReplicas(metas, &localErr) || needFabric
	}
	v.lay.Mapped = mappedRanks(v.src)
	if needFabric && localErr == nil {
		if s.fab == nil {
			localErr = errf(nil, opName(op), name, "remote shards but no fabric")
		} else {
			v.shared, localErr = s.newReadCtx(0)
		}
	}
	// Round 2: every rank must have mapped and connected, or nobody keeps it.
	ok := ""
	if localErr != nil {
		ok = localErr.Error()
	}
	blobs, err = s.gather(tag+"-ok", ok)
	if err == nil {
		var failed []string
		var failedRanks []int
		for r, b := range blobs {
			var e string
			if json.Unmarshal(b, &e) != nil || e != "" {
				failed = append(failed, fmt.Sprintf("rank %d: %s", r, e))
				failedRanks = append(failedRanks, r)
			}
		}
		if len(failed) > 0 {
			err = &Error{Op: opName(op), Var: name, Kind: ErrMismatch, Ranks: failedRanks, Detail: "failed on " + strings.Join(failed, "; ")}
		}
	}
	if err != nil {
		v.release()
		return err
	}
	// Every peer on this node has mapped the shard: its name is no longer
	// needed, and a rank that is killed now leaves no file behind.
	own.unlink()
	if s.tel != nil {
		id, err := s.tel.AddVar(name, dt.String(), v.rowBytes, v.global, v.nLocal)
		if err == nil {
			v.telID = int32(id)
		}
	}
	s.publish(func(m varMap) { m[name] = v })
	return nil
}

// addReplicas fills the variable's view of the other groups' shards when
// every group has the home group's shard sizes (else reads stay in the
// home group and never fail over): same-node shards are mapped, others
// read through the fabric (it returns true then). A mapping failure is
// recorded in *localErr (the collective then fails on every rank).
func (v *Var) addReplicas(metas []varMeta, localErr *error) (needFabric bool) {
	s := v.s
	home := s.rank / s.width
	for r, m := range metas {
		if r/s.width != home && m.NLocal != metas[s.groupLo+r%s.width].NLocal {
			return false
		}
	}
	v.lay.Alt = s.repl.alt
	for r, m := range metas {
		if r/s.width == home || *localErr != nil {
			continue
		}
		if !s.peers[r].sameNode {
			v.remote[r] = remoteShard{key: m.Key, base: m.Base}
			needFabric = true
			continue
		}
		f, err := openShard(m.Path, r, m.NLocal*m.RowBytes)
		if err != nil {
			*localErr = &Error{Var: v.name, Ranks: []int{r}, Side: fault.Local, Detail: "map the replica's shard", Err: err}
			return needFabric
		}
		v.mapped = append(v.mapped, f)
		v.src[r] = f.data
	}
	return needFabric
}

// mappedRanks is placement's view of src: which ranks' copies are mapped.
func mappedRanks(src [][]byte) []bool {
	m := make([]bool, len(src))
	for r, b := range src {
		m[r] = b != nil
	}
	return m
}

// checkAgreement returns the same error on every rank when any rank failed
// locally or the ranks disagree on op, name, dtype or row shape.
func checkAgreement(metas []varMeta, rank int, localErr error) error {
	var failed []string
	var failedRanks []int
	for r, m := range metas {
		if m.Err != "" {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, m.Err))
			failedRanks = append(failedRanks, r)
		}
	}
	var mism []string
	diff := func(field string, val func(m varMeta) string) {
		groups := map[string][]int{}
		var order []string
		for r, m := range metas {
			k := val(m)
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], r)
		}
		if len(order) < 2 {
			return
		}
		parts := make([]string, 0, len(order))
		for _, k := range order {
			parts = append(parts, fmt.Sprintf("%s on %s", k, fault.RankList(groups[k])))
		}
		mism = append(mism, field+": "+strings.Join(parts, ", "))
	}
	diff("call", func(m varMeta) string { return m.Op })
	diff("name", func(m varMeta) string { return fmt.Sprintf("%q", m.Name) })
	diff("dtype", func(m varMeta) string { return m.DType.String() })
	diff("row", func(m varMeta) string { return fmt.Sprintf("%d elements/%d bytes", m.RowElems, m.RowBytes) })
	m := metas[rank]
	switch {
	case len(mism) > 0:
		return errf(ErrMismatch, opName(m.Op), m.Name, "%s", strings.Join(mism, "; "))
	case localErr != nil:
		return localErr
	case len(failed) > 0:
		return &Error{Op: opName(m.Op), Var: m.Name, Kind: ErrMismatch, Ranks: failedRanks,
			Detail: "failed on " + strings.Join(failed, "; ")}
	}
	return nil
}

// opName is the API name of a collective's op ("add" → "Add").
func opName(op string) string {
	switch op {
	case "add":
		return "Add"
	case "init":
		return "Init"
	case "free":
		return "Free"
	}
	return op
}

// publish replaces the variable map by an edited copy (collMu held).
func (s *Store) publish(edit func(varMap)) {
	old := *s.vars.Load()
	m := make(varMap, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	edit(m)
	s.vars.Store(&m)
}

// Var returns a handle to variable name.
func (s *Store) Var(name string) (*Var, error) { return s.lookup("lookup", name) }

// lookup is variable name for call op, or its error.
func (s *Store) lookup(op, name string) (*Var, error) {
	v := (*s.vars.Load())[name]
	if v == nil || s.closed.Load() {
		return nil, s.errLookup(op, name)
	}
	return v, nil
}

// Vars lists the variable names, sorted.
func (s *Store) Vars() []string {
	m := *s.vars.Load()
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Query describes variable name.
func (s *Store) Query(name string) (VarInfo, error) {
	v, err := s.lookup("query", name)
	if err != nil {
		return VarInfo{}, err
	}
	return v.Info(), nil
}

// Info describes the variable.
func (v *Var) Info() VarInfo {
	s := v.s
	ranks := append([]int(nil), v.lay.Home...)
	start, group := int64(0), s.rank/s.width
	if m := v.lay.ShardOf(s.rank); m >= 0 {
		start = v.lay.Offsets[m]
	}
	if v.storage {
		group = v.group
	}
	return VarInfo{Name: v.name, DType: v.dt, RowElems: v.rowElems, RowBytes: v.rowBytes,
		GlobalRows: v.global, LocalRows: v.nLocal, LocalStart: start,
		Shards: append([]int64(nil), v.lay.Offsets...), Group: group, GroupRanks: ranks}
}

// Name is the variable's name.
func (v *Var) Name() string { return v.name }

// RowBytes is the size of one row.
func (v *Var) RowBytes() int64 { return v.rowBytes }

// GlobalRows is the number of rows of the group's global index space.
func (v *Var) GlobalRows() int64 { return v.global }
