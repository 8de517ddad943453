package engine

// The trainers' side of storage-only ranks (storage.go): join them at the
// job rendezvous, build each variable they hold (home group, replicas in
// failover order, mapped or remote shards), and leave when the store
// closes.

import (
	"encoding/json"
	"fmt"

	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

// joinStorage is the trainer's side of the join (Open, after the
// trainers' own rounds): learn the storage ranks, connect to them, and
// create a variable for every shard set they hold.
func (s *Store) joinStorage() error {
	o := &s.opts
	T, S := s.world, o.Storage.Ranks
	width := o.Storage.Width
	if width == 0 {
		width = S
	}
	if err := s.connectJoin(s.rank, T); err != nil {
		return err
	}
	me := nodeRecord(o, s.rank)
	if o.NodeMode == NodeModeFabric {
		me.Node = s.peers[s.rank].Node // as in the trainers' own round
	}
	mine := joinRecord{peerInfo: me, Role: RoleTrain, Job: o.Storage.Job, Trainers: T, Storage: S, Width: width}
	recs, err := s.joinNodes(mine, T+S)
	if err != nil {
		return err
	}
	needFabric := false
	for i := 0; i < S; i++ {
		p := recs[T+i].peerInfo
		p.sameNode = p.Node == s.peers[s.rank].Node
		p.sameMachine = p.Host == s.peers[s.rank].Host && p.BootID == s.peers[s.rank].BootID
		s.peers = append(s.peers, p)
		needFabric = needFabric || !p.sameNode
		if !p.sameNode {
			s.fabricPeers++
		}
	}
	var localErr error
	if needFabric && s.fab == nil {
		if s.fab, localErr = fabric.Open(o.Fabric); localErr != nil {
			localErr = wrapf(nil, "Open", "", localErr, "fabric for the storage ranks")
		}
	}
	vars := make([]joinVars, T+S)
	mineVars := joinVars{}
	if localErr != nil {
		mineVars.Err = localErr.Error()
	}
	if err := s.joinGather("join-vars", mineVars, func(r int, b []byte) error { return json.Unmarshal(b, &vars[r]) }); err != nil {
		return err
	}
	var failed []int
	for r, x := range vars {
		if x.Err != "" {
			failed = append(failed, r)
		}
		if r >= T {
			s.peers[r].Addr = x.Addr
		}
	}
	if localErr != nil {
		return localErr
	}
	if len(failed) > 0 {
		return &Error{Op: "Open", Kind: ErrMismatch, Ranks: failed, Detail: "join failed on " + fault.RankList(failed) + ": " + vars[failed[0]].Err}
	}
	// Watch the storage ranks on this machine: a dead one's rows fail over
	// at once.
	var ranks, pids []int
	for r := T; r < T+S; r++ {
		if s.peers[r].sameMachine {
			ranks, pids = append(ranks, r), append(pids, s.peers[r].Pid)
		}
	}
	if len(ranks) > 0 {
		w, err := watchPeers(s.health, ranks, pids)
		if err != nil {
			return wrapf(nil, "Open", "", err, "storage peer watcher")
		}
		s.swatcher = w
	}
	if s.repl.after == 0 && S > width {
		s.repl.after = o.FailoverAfter
		if s.repl.after <= 0 {
			s.repl.after = DefaultFailoverAfter
		}
	}
	return s.storageVars(vars, T, S, width)
}

// storageVars creates the trainer's view of every variable the storage
// ranks hold: home group, shard offsets, mapped or remote shards, replicas.
func (s *Store) storageVars(vars []joinVars, T, S, width int) error {
	groups := S / width
	// Home group: most members on this node; ties go to rank mod groups.
	home, best := s.rank%groups, -1
	for k := 0; k < groups; k++ {
		h := (s.rank + k) % groups
		n := 0
		for o := 0; o < width; o++ {
			if s.peers[T+h*width+o].sameNode {
				n++
			}
		}
		if n > best {
			home, best = h, n
		}
	}
	ref := vars[T].Vars
	for i := 1; i < S; i++ {
		got := vars[T+i].Vars
		if len(got) != len(ref) {
			return &Error{Op: "Open", Kind: ErrMismatch, Ranks: []int{T, T + i},
				Detail: fmt.Sprintf("storage ranks 0 and %d hold %d and %d variables", i, len(ref), len(got))}
		}
		for k := range got {
			a, b := ref[k], got[k]
			if a.Name != b.Name || a.DType != b.DType || a.RowElems != b.RowElems {
				return &Error{Op: "Open", Kind: ErrMismatch, Ranks: []int{T, T + i}, Var: a.Name,
					Detail: fmt.Sprintf("storage rank 0 holds %q %s×%d, storage rank %d %q %s×%d",
						a.Name, a.DType, a.RowElems, i, b.Name, b.DType, b.RowElems)}
			}
		}
	}
	rankOf := func(h, o int) int { return T + h*width + o }
	for k, m0 := range ref {
		v := &Var{s: s, name: m0.Name, dt: m0.DType, rowElems: m0.RowElems, rowBytes: m0.RowBytes, telID: -1,
			storage: true, group: home}
		v.lay = placement.Layout{RowBytes: m0.RowBytes, Offsets: make([]int64, width+1), Home: make([]int, width), Self: s.rank}
		v.src = make([][]byte, s.nranks)
		v.remote = make([]remoteShard, s.nranks)
		replicated := groups > 1
		for o := 0; o < width; o++ {
			r := rankOf(home, o)
			m := vars[r].Vars[k]
			v.lay.Home[o] = r
			v.lay.Offsets[o+1] = v.lay.Offsets[o] + m.NLocal
			for h := 0; h < groups; h++ {
				if vars[rankOf(h, o)].Vars[k].NLocal != m.NLocal {
					replicated = false
				}
			}
		}
		if replicated {
			v.lay.Alt = make([][]int, width)
			for o := range v.lay.Alt {
				v.lay.Alt[o] = placement.FailoverOrder(groups, width, T, home, o, s.sameNode)
			}
		}
		v.global = v.lay.Rows()
		// Shards: mapped when on this node, else through the fabric.
		needFabric := false
		for h := 0; h < groups; h++ {
			if h != home && !replicated {
				continue
			}
			for o := 0; o < width; o++ {
				r := rankOf(h, o)
				m := vars[r].Vars[k]
				v.remote[r] = remoteShard{key: m.Key, base: m.Base}
				if !s.peers[r].sameNode {
					needFabric = true
					continue
				}
				f, err := openShard(m.Path, r, m.NLocal*m.RowBytes)
				if err != nil {
					v.release()
					return wrapf(nil, "Open", m0.Name, err, "storage rank %d's shard", r-T)
				}
				v.mapped = append(v.mapped, f)
				v.src[r] = f.data
			}
		}
		v.lay.Mapped = mappedRanks(v.src)
		if needFabric {
			var err error
			if v.shared, err = s.newReadCtx(0); err != nil {
				v.release()
				return err
			}
		}
		if s.tel != nil {
			if id, err := s.tel.AddVar(v.name, v.dt.String(), v.rowBytes, v.global, 0); err == nil {
				v.telID = int32(id)
			}
		}
		s.publish(func(m varMap) { m[v.name] = v })
	}
	return nil
}

// leaveStorage ends the join at Close: every trainer and storage rank
// meets at the job-close barrier (storage ranks then leave Serve). A
// failure that names only storage ranks known dead is not an error of the
// job.
func (s *Store) leaveStorage() error {
	if s.jx == nil {
		return nil
	}
	err := s.jx.Barrier("job-close", s.opts.Timeout)
	if err != nil {
		all := true
		for _, r := range fault.RanksOf(err) {
			all = all && r >= s.world && s.health.Dead(r)
		}
		if all && len(fault.RanksOf(err)) > 0 {
			err = nil
		}
	}
	if cerr := s.jx.Close(); err == nil && cerr != nil {
		err = cerr
	}
	s.jx = nil
	if err != nil {
		return wrapf(nil, "Close", "", err, "job-close barrier with the storage ranks")
	}
	return nil
}

// ---- storage rank ----
