package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/engine/ctrl"
	"github.com/ddstore/ddstore/engine/mesh"
	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// peerInfo is what Open learns about every rank.
type peerInfo struct {
	Host        string    `json:"host"`
	BootID      string    `json:"boot"`
	Node        string    `json:"node"` // node identity; equal means "same node"
	Pid         int       `json:"pid"`
	Addr        []byte    `json:"addr,omitempty"` // fabric address, nil without fabric
	Mesh        mesh.Addr `json:"mesh"`           // where the store's own connections reach it (mesh)
	CtrlIPs     []string  `json:"cips,omitempty"` // where this rank listens as its node's agent (tree)
	CtrlPort    int       `json:"cport,omitempty"`
	sameNode    bool      // shards read through shared memory
	sameMachine bool      // same host and boot (sameNode, unless NodeMode "fabric")
}

// varMap is the immutable name → variable map; replaced on Add/Free.
type varMap map[string]*Var

// Store is one rank's view of the distributed store. All methods are safe
// for concurrent use. Collective methods (Add, Init, Free, Close) must be
// called by every rank in the same order.
type Store struct {
	opts Options
	ex   bootstrap.Exchanger // collectives: the mesh once Open has connected it
	boot bootstrap.Exchanger // the launcher's exchange (only bootstraps)
	mesh *mesh.Mesh          // the store's own connections (Control mesh); nil in a one-rank world
	tree *ctrl.Ctrl          // the same with Control tree
	cp   controlPlane        // mesh or tree; nil in a one-rank world
	env  bootstrap.Env
	job  string
	// bootMethod is how the job bootstrapped: "pmi", "pmi2", "tcp", "dir", "single".
	bootMethod string
	// releaseRendezvous gives back the launcher's rendezvous, which the
	// store holds until it closes (see finishLaunchExchange); nil if none.
	releaseRendezvous func()

	rank, world, localRank int
	// nranks: the world plus the storage-only ranks joined to it (global
	// ids world.. nranks-1; storage.go); the size of every per-rank table.
	nranks         int
	width, groupLo int
	peers          []peerInfo // by global rank
	fabricPeers    int        // ranks on other nodes: the most a fabric reader holds (readCtx.connect)

	fab *fabric.Fabric // nil when the group is on one node
	tel *telemetry.Writer

	vars   atomic.Pointer[varMap]
	closed atomic.Bool

	collMu    sync.Mutex // serializes collectives (Add, Init, Free, Barrier, AllGather, AllReduceFloat32, Close)
	seq       int        // collective sequence number, for tags
	reduceBuf []float32  // AllReduceFloat32's working copy (under collMu)

	health    *placement.Health // dead and suspect ranks, as reads see them (placement)
	deadCause sync.Map          // rank → error: why it was marked dead
	timedOut  sync.Map          // rank → error: a read from it timed out, returned to the caller (closeBarrier)
	watcher   *pidWatcher

	// Storage-only ranks (storage.go): the join exchange with the other
	// launch, the watcher of storage ranks on this machine, and a storage
	// rank's own shards.
	jx       bootstrap.Exchanger
	swatcher *pidWatcher
	stored   []storedShard
	repl     replicaState // failover to other width groups (replica.go)

	readersMu sync.Mutex
	readers   map[*Reader]struct{}

	hbStop chan struct{}
	hbDone chan struct{}

	gpu storeGPU // the device read path (device.go)

	secretSrc string // where the job's secret came from (Secret)

	lingerMu sync.Mutex
	linger   map[*Var]struct{} // freed variables whose release waits for calls in flight (Free timed out)
}

// Open joins the job: it applies the environment overrides documented on
// Options and validates the result, connects the bootstrap exchange,
// learns which ranks share this node, opens the fabric when a peer of the
// caller's width group is on another node, starts telemetry and the
// dead-peer watcher. Every rank of the job must call Open.
func Open(o Options) (*Store, error) {
	if err := o.applyEnv(); err != nil {
		return nil, err
	}
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	env := o.Bootstrap.Env
	if env.World == 0 {
		e, err := bootstrap.DetectEnv()
		if err != nil {
			return nil, wrapf(nil, "Open", "", err, "launcher environment")
		}
		env = e
		o.Bootstrap.Env = e
	}
	ex, err := bootstrap.Connect(o.Bootstrap)
	if err != nil {
		return nil, wrapf(nil, "Open", "", err, "bootstrap")
	}
	s := &Store{opts: o, ex: ex, boot: ex, env: env, rank: ex.Rank(), world: ex.Size(), localRank: env.LocalRank,
		readers: map[*Reader]struct{}{}}
	s.job, s.bootMethod = bootstrap.JobOf(ex, env.Job), bootstrap.MethodOf(ex)
	s.secretSrc = bootstrap.SecretSource(ex)
	if s.opts.Fabric.GatherKey == 0 {
		// The targets answer only gather requests with the job's key
		// (from the secret; in an insecure job from the job's identity).
		s.opts.Fabric.GatherKey = gatherKey(bootstrap.SecretOf(ex), jobIdentity(&s.opts, bootstrap.JobTokenOf(ex)))
	}
	if s.job == "" {
		s.job = fmt.Sprintf("p%d", os.Getpid())
	}
	if o.Role == RoleStorage {
		err = s.openStorageRole()
	} else if err = s.open(); err == nil && o.Storage.Ranks > 0 {
		err = s.joinStorage()
	}
	if err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

// applyEnv applies the environment overrides documented on Options, as
// package configs reads them (configs.ReadOverrides, configs.ReadLaunch):
// DDSTORE_FABRIC and FABRIC_IFACE fill an empty Fabric.Provider and
// Fabric.Domain; DDSTORE_TELEMETRY_DIR replaces the default TelemetryDir
// ("" or "/dev/shm"); a false DDSTORE_TELEMETRY sets DisableTelemetry (a
// true one leaves it as set); DDSTORE_PROFILE sets Profile either way; the
// storage join's variables fill the zero storage fields; DDSTORE_CONTROL
// replaces Control "" or "mesh", DDSTORE_CTRL_* fill the tree's timings
// when none is set. Booleans accept
// 1/0, true/false, on/off and yes/no in any case; anything else is an
// error naming the variable. Unset or empty variables change nothing.
func (o *Options) applyEnv() error {
	env, err := configs.ReadOverrides()
	if err != nil {
		return wrapf(ErrInvalid, "options", "", err, "environment")
	}
	if env.Telemetry != nil && !*env.Telemetry {
		o.DisableTelemetry = true
	}
	if env.Profile != nil {
		o.Profile = *env.Profile
	}
	if env.TelemetryDir != "" && (o.TelemetryDir == "" || o.TelemetryDir == "/dev/shm") {
		o.TelemetryDir = env.TelemetryDir
	}
	if env.Fabric != "" && o.Fabric.Provider == "" {
		o.Fabric.Provider = env.Fabric
	}
	if env.Iface != "" && o.Fabric.Domain == "" {
		o.Fabric.Domain = env.Iface
	}
	if env.Control != "" && (o.Control == "" || o.Control == DefaultControl) {
		o.Control = env.Control
	}
	if o.CtrlPeriod == 0 && o.CtrlSuspectAfter == 0 && o.CtrlDeadAfter == 0 {
		o.CtrlPeriod, o.CtrlSuspectAfter, o.CtrlDeadAfter = env.CtrlPeriod, env.CtrlSuspectAfter, env.CtrlDeadAfter
	}
	return o.applyStorageEnv()
}

func (s *Store) open() error {
	o := &s.opts
	s.width = o.Width
	if s.width == 0 {
		s.width = s.world
	}
	if s.world%s.width != 0 {
		return errf(ErrInvalid, "Open", "", "world size %d is not a multiple of Width %d", s.world, s.width)
	}
	s.groupLo = s.rank / s.width * s.width
	s.nranks = s.world + max(o.Storage.Ranks, 0)
	s.health = placement.NewHealth(s.nranks, telemetry.Nanotime)
	empty := varMap{}
	s.vars.Store(&empty)

	// Round 1: node identity and pid.
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	me := peerInfo{Host: host, BootID: strings.TrimSpace(string(boot)), Pid: os.Getpid()}
	me.Node = me.Host + "/" + me.BootID
	if o.NodeMode == NodeModeFabric {
		me.Node = fmt.Sprintf("%s/rank%d", me.Node, s.rank)
	}
	// The store's own connections: listen now, publish the address in
	// round 1, connect right after it; every later collective uses them.
	var treeLn net.Listener
	if s.world > 1 && o.Control == ControlTree {
		ln, port, err := treeListen(bootstrap.SecretOf(s.boot), s.rank)
		if err != nil {
			return &Error{Op: "Open", Kind: ErrInvalid, Side: fault.Local, Detail: "control plane: cannot listen", Err: err}
		}
		treeLn = ln
		defer func() {
			if s.tree == nil {
				ln.Close() // Open failed before the control plane took it
			}
		}()
		me.CtrlIPs, me.CtrlPort = ctrlIPs(), port
	} else if s.world > 1 {
		m, addr, err := mesh.Listen(mesh.Options{Rank: s.rank, World: s.world, Token: s.job, Secret: bootstrap.SecretOf(s.boot),
			Timeout: o.Timeout, Liveness: o.Liveness, OnDead: s.onDead})
		if err != nil {
			return wrapf(nil, "Open", "", err, "mesh")
		}
		s.mesh = m
		addr.Node = me.Host + "/" + me.BootID
		m.SetNode(addr.Node)
		me.Mesh = addr
	}
	blobs, err := s.gather("open-node", me)
	if err != nil {
		return err
	}
	s.peers = make([]peerInfo, s.world)
	for r, b := range blobs {
		if err := json.Unmarshal(b, &s.peers[r]); err != nil {
			return &Error{Op: "Open", Kind: ErrMismatch, Ranks: []int{r}, Detail: "bad node record", Err: err}
		}
		s.peers[r].sameNode = s.peers[r].Node == me.Node
		s.peers[r].sameMachine = s.peers[r].Host == me.Host && s.peers[r].BootID == me.BootID
		if !s.peers[r].sameNode {
			s.fabricPeers++
		}
	}
	if s.mesh != nil {
		addrs := make([]mesh.Addr, s.world)
		for r := range addrs {
			addrs[r] = s.peers[r].Mesh
		}
		if err := s.mesh.Connect(addrs); err != nil {
			return wrapBootstrap("Open: connecting the ranks", err)
		}
		s.ex, s.cp = s.mesh, s.mesh
	}
	if treeLn == nil {
		if err := s.finishLaunchExchange(); err != nil {
			return err
		}
	}
	s.initReplicas()

	// Round 2: every rank's fabric address, and whether its local setup
	// (fabric, telemetry) failed, which every rank must learn of. Under
	// tree the control plane's own start carries it: its table is held once
	// per node (a memfd that the node's ranks map), and the peers' addresses
	// are views into it. Under mesh it is one all-gather.
	addr, iface, localErr := s.openLocal(host)
	mine := encodeAddrRecord(addr, iface, localErr)
	var recordOf func(r int) []byte
	if treeLn != nil {
		t, err := s.startTree(treeLn, mine)
		if err != nil {
			return wrapBootstrap("Open: connecting the ranks", err)
		}
		s.tree = t
		s.ex, s.cp = t, t
		if err := s.finishLaunchExchange(); err != nil {
			return err
		}
		recordOf = t.Table().Blob
	} else {
		blobs, err := s.gatherBytes("open-addr", mine)
		if err != nil {
			return err
		}
		recordOf = func(r int) []byte { return blobs[r] }
	}
	ifaces := make([]fabricIface, s.world)
	var failed []string
	var failedRanks []int
	for r := range s.world {
		a, ifc, why, err := decodeAddrRecord(recordOf(r))
		if err != nil {
			return &Error{Op: "Open", Kind: ErrMismatch, Ranks: []int{r}, Detail: "bad address record", Err: err}
		}
		if why != "" {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, why))
			failedRanks = append(failedRanks, r)
		}
		s.peers[r].Addr, ifaces[r] = a, ifc
	}
	if localErr != nil {
		return &Error{Op: "Open", Ranks: []int{s.rank}, Side: fault.Local, Err: localErr}
	}
	if len(failed) > 0 {
		return &Error{Op: "Open", Ranks: failedRanks, Side: fault.Remote, Detail: "failed on " + strings.Join(failed, "; ")}
	}
	if err := checkLoopback(s.peers, ifaces, func(r int) []int {
		var out []int
		for q := range s.peers {
			if s.readsThroughFabric(r, q) {
				out = append(out, q)
			}
		}
		return out
	}); err != nil {
		return err
	}

	// Peers on this machine (even in NodeMode "fabric", where they are
	// read through the fabric), of the group and the replica groups: watch
	// their pids, so that reads of a dead peer fail over (or fail) before
	// they reach the provider.
	var ranks, pids []int
	for r := range s.peers {
		if r != s.rank && s.peers[r].sameMachine {
			ranks = append(ranks, r)
			pids = append(pids, s.peers[r].Pid)
		}
	}
	if len(ranks) > 0 {
		if s.watcher, err = watchPeers(s.health, ranks, pids); err != nil {
			return wrapf(nil, "Open", "", err, "peer watcher")
		}
	}
	if s.tel != nil {
		s.hbStop, s.hbDone = make(chan struct{}), make(chan struct{})
		go s.heartbeat()
	}
	return nil
}

// openLocal is Open's local setup, whose failure every rank must learn of
// (round 2): the fabric, when this rank reads a peer through it, and
// telemetry. It returns this rank's fabric address and interface (none
// without fabric) and the error to publish.
func (s *Store) openLocal(host string) ([]byte, fabricIface, error) {
	o := &s.opts
	var mine []int // the ranks read through the fabric
	for r := range s.peers {
		if s.readsThroughFabric(s.rank, r) {
			mine = append(mine, r)
		}
	}
	if s.localRank == 0 {
		defer s.sweepLeftovers() // after this rank's own segment is there
	}
	var addr []byte
	var iface fabricIface
	var err error
	if len(mine) > 0 {
		if name := s.chooseIface(mine); name != "" {
			o.Fabric.Domain = name
		}
		if s.fab, err = fabric.Open(o.Fabric); err != nil {
			return nil, iface, err
		}
		// A rank found dead (control plane, pid watcher, a failed read,
		// MarkDead) cuts short the fabric reads waiting on it.
		s.health.OnDead(s.fab.PeerDead)
		addr = s.fab.Address()
		iface = ifaceOf(s.fab.Info().Domain)
		if n, av := len(mine), s.fab.Info().AVCount; av > 0 && n > av {
			return addr, iface, &Error{Op: "Open", Kind: ErrInvalid, Side: fault.Local,
				Detail: fmt.Sprintf("rank %d reads %d ranks through the fabric, more than its address vector holds (%d): "+
					"raise fabric.max_peers (env DDSTORE_FABRIC_MAX_PEERS; provider %s allows %d)",
					s.rank, n, av, s.fab.Info().Provider, s.fab.Info().MaxPeers)}
		}
	} else if o.Fabric.Provider != "" {
		// No rank of the group needs the fabric on this run, but a provider
		// this libfabric lacks (a typo in DDSTORE_FABRIC) is still an error
		// here, not on the first multi-node run. Without libfabric at all a
		// single-node store works: only a missing provider fails.
		if err := fabric.CheckProvider(o.Fabric.Provider); err != nil && !errors.Is(err, fault.ErrNoLibrary) {
			return nil, iface, wrapf(nil, "", "", err, "Fabric.Provider (DDSTORE_FABRIC, config fabric.provider)")
		}
	}
	if !o.DisableTelemetry {
		s.tel, err = telemetry.Create(telemetry.WriterOptions{
			Dir: o.TelemetryDir, Job: s.job, Rank: s.rank, World: s.world, Host: host,
			Provider: s.providerName(), ReaderMode: "shared+readers", Method: s.env.Launcher,
		})
		if err != nil {
			return addr, iface, wrapf(nil, "", "", err, "telemetry")
		}
	}
	return addr, iface, nil
}

// readsThroughFabric reports whether rank r reads rank q's shards through
// the fabric: q is on another node (or NodeMode is "fabric") and in r's
// width group, or any rank with replica groups (failover reads).
func (s *Store) readsThroughFabric(r, q int) bool {
	if r == q || s.peers[q].Node == s.peers[r].Node {
		return false
	}
	lo := r / s.width * s.width
	return s.world > s.width || (q >= lo && q < lo+s.width)
}

func (s *Store) providerName() string {
	if s.fab != nil {
		return s.fab.Info().Provider
	}
	return "shm-map"
}

// Rank is this process's global rank.
func (s *Store) Rank() int { return s.rank }

// World is the number of ranks.
func (s *Store) World() int { return s.world }

// LocalRank is the rank among the processes on this node, as the launcher said.
func (s *Store) LocalRank() int { return s.localRank }

// Width is the number of ranks per replica group.
func (s *Store) Width() int { return s.width }

// Group is the index of this rank's width group.
func (s *Store) Group() int { return s.rank / s.width }

// homeRanks are the ranks of this rank's width group, by member: where
// the store's own variables are read from.
func (s *Store) homeRanks() []int {
	r := make([]int, s.width)
	for i := range r {
		r[i] = s.groupLo + i
	}
	return r
}

// Job is the job id used to name shard and telemetry files.
func (s *Store) Job() string { return s.job }

// Bootstrap is how the ranks found each other at Open: "pmi" (MPICH's
// mpiexec), "pmi2" (srun --mpi=pmi2), "tcp", "dir" or "single".
func (s *Store) Bootstrap() string { return s.bootMethod }

// Telemetry is the telemetry writer, nil when telemetry is off.
func (s *Store) Telemetry() *telemetry.Writer { return s.tel }

// Fabric is the open fabric, nil when every peer of the group is on this node.
func (s *Store) Fabric() *fabric.Fabric { return s.fab }

// SameNode reports whether rank's shards are read through shared memory.
func (s *Store) SameNode(rank int) bool {
	return rank >= 0 && rank < len(s.peers) && s.peers[rank].sameNode
}

// heartbeat keeps the telemetry segment's heartbeat fresh (ddtop tells a
// live writer from a stale one by it) and publishes the fabric's
// quarantined readers and gather strangers, until Close.
func (s *Store) heartbeat() {
	defer close(s.hbDone)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	s.tel.Heartbeat()
	// Readers the fabric quarantined (a provider call that never returned)
	// and gather requests with another key dropped by the targets, since
	// this store opened; process-wide, published with the heartbeat.
	quar, strangers := fabric.QuarantinedReaders(), fabric.GatherStrangers()
	for {
		select {
		case <-s.hbStop:
			return
		case <-t.C:
			s.tel.Heartbeat()
			if q := fabric.QuarantinedReaders(); q > quar {
				s.tel.AddProc(telemetry.ProcQuarantinedReaders, int64(q-quar))
				quar = q
			}
			if g := fabric.GatherStrangers(); g > strangers {
				s.tel.AddProc(telemetry.ProcGatherStrangers, int64(g-strangers))
				strangers = g
			}
		}
	}
}

// finishLaunchExchange closes the launcher's exchange once the store's own
// connections carry every later collective (a one-rank store needs none).
// Under a PMI launcher that is the finalize: a rank that then exits without
// Close ends cleanly, where Hydra kills the whole job when a rank drops its
// PMI socket unfinalized.
func (s *Store) finishLaunchExchange() error {
	if s.boot == nil {
		return nil
	}
	if s.ex == s.boot {
		s.ex = bootstrap.Single()
	}
	release, err := bootstrap.CloseKeepingRendezvous(s.boot)
	s.boot, s.releaseRendezvous = nil, release
	if err != nil {
		return wrapf(nil, "Open", "", err, "finalizing the launcher's exchange")
	}
	return nil
}
