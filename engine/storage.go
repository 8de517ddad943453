package engine

// Storage-only ranks. A job may have ranks that hold shards and serve
// reads but run no training: they open with Role "storage", load their
// shards from files, and serve them (the fabric's progress thread answers
// reads; the rank's own goroutine only waits in Serve) until the trainers
// close the store. They come from a separate launch (a second ddrun, or a
// second `srun --overlap` step on the training nodes), and meet the
// trainers at a join rendezvous: a bootstrap exchange of trainers +
// storage ranks whose root is trainer 0 (Storage.Addr, "host:port"), tied
// together by a job name and a token (Storage.Job, Storage.Token) that
// both launches give.
//
// Ranks. The trainers keep their launch's ranks 0..T-1 (Store.World is T;
// Barrier, AllGather and AllReduceFloat32 stay among them); storage rank i
// of its launch has the global id T+i, which errors, telemetry and
// VarInfo.GroupRanks use.
//
// Layout. The S storage ranks form replica groups of Storage.Width ranks
// (0: one group of S); member o of every group holds shard o, loaded from
// the same file. A trainer reads from one home group, chosen as the group
// with most ranks on its node (ties: trainer rank modulo the groups), and
// fails over to the others (replica.go): same node first, then nearest.
//
// Files (Storage.Dir on the storage ranks): one directory per variable,
// named after it, holding one file per shard:
//
//	DIR/<variable>/shard-<o>.npy   a NumPy array: shape (rows, ...), C order,
//	                               dtype <i4 <i8 |u1 <f4 <f8 |b1 (or |V/|S
//	                               bytes); a row is everything after axis 0
//	DIR/<variable>/shard-<o>.bin   raw rows, with DIR/<variable>/meta.json:
//	                               {"dtype": "float32", "row_elems": 784}
//
// Every storage rank loads every variable (sorted by name) for its member
// o; a missing file is an Open error naming the rank and the path.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// Roles.
const (
	// RoleTrain (default, "" means it) runs training: it may Add its own
	// variables and reads those of storage ranks.
	RoleTrain = "train"
	// RoleStorage holds shards loaded from Storage.Dir and serves reads
	// until the job closes (Store.Serve); it runs no training.
	RoleStorage = "storage"
)

// DefaultServeTimeout bounds Serve: the longest a storage rank waits for
// the job to close.
const DefaultServeTimeout = 7 * 24 * time.Hour

// StorageOptions configure storage-only ranks (see storage.go). Trainers
// set Ranks (> 0) to join them; storage ranks set Role "storage" in
// Options, Ranks, Trainers and Dir. Both launches give the same Job,
// Token, Addr and Width. Environment variables (applied by Open when the
// field is zero): DDSTORE_ROLE, DDSTORE_STORAGE_RANKS,
// DDSTORE_STORAGE_TRAINERS, DDSTORE_STORAGE_WIDTH, DDSTORE_STORAGE_JOB,
// DDSTORE_STORAGE_TOKEN, DDSTORE_STORAGE_ADDR, DDSTORE_STORAGE_DATA.
type StorageOptions struct {
	Ranks    int    // storage-only ranks in the job; 0: none
	Trainers int    // trainer ranks (required on storage ranks)
	Width    int    // storage ranks per replica group; 0 = Ranks (one group)
	Job      string // job name both launches give (required)
	Token    string // job token both launches give; default Job
	Addr     string // join rendezvous host:port; trainer 0 listens there (required)
	Dir      string // storage ranks: directory of the shard files
	// ServeTimeout bounds Serve (default DefaultServeTimeout).
	ServeTimeout time.Duration
}

// applyStorageEnv fills zero storage fields from the launch's environment
// (configs.ReadLaunch: DDSTORE_ROLE, DDSTORE_STORAGE_*).
func (o *Options) applyStorageEnv() error {
	l, err := configs.ReadLaunch()
	if err != nil {
		return wrapf(ErrInvalid, "options", "", err, "environment")
	}
	fill := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	fillN := func(dst *int, v int, set bool) {
		if *dst == 0 && set {
			*dst = v
		}
	}
	fill(&o.Role, l.Role)
	st, e := &o.Storage, l.Storage
	fill(&st.Job, e.Job)
	fill(&st.Token, e.Token)
	fill(&st.Addr, e.Addr)
	fill(&st.Dir, e.Data)
	fillN(&st.Ranks, e.Ranks, e.RanksSet)
	fillN(&st.Trainers, e.Trainers, e.TrainersSet)
	fillN(&st.Width, e.Width, e.WidthSet)
	return nil
}

// validateStorage checks the role and storage options.
func (o *Options) validateStorage() error {
	st := &o.Storage
	bad := func(format string, a ...any) error { return errf(ErrInvalid, "options", "", format, a...) }
	switch o.Role {
	case "", RoleTrain, RoleStorage:
	default:
		return bad("Role %q: want %q or %q", o.Role, RoleTrain, RoleStorage)
	}
	if st.Ranks < 0 || st.Trainers < 0 || st.Width < 0 || st.ServeTimeout < 0 {
		return bad("Storage: negative Ranks, Trainers, Width or ServeTimeout")
	}
	if o.Role != RoleStorage && st.Ranks == 0 {
		return nil
	}
	switch {
	case st.Ranks == 0:
		return bad("Role storage needs Storage.Ranks (DDSTORE_STORAGE_RANKS)")
	case o.Role == RoleStorage && st.Trainers == 0:
		return bad("Role storage needs Storage.Trainers (DDSTORE_STORAGE_TRAINERS)")
	case o.Role == RoleStorage && st.Dir == "":
		return bad("Role storage needs Storage.Dir (DDSTORE_STORAGE_DATA): the shard files")
	case st.Job == "":
		return bad("storage ranks need Storage.Job (DDSTORE_STORAGE_JOB): the name both launches give")
	case st.Addr == "":
		return bad("storage ranks need Storage.Addr (DDSTORE_STORAGE_ADDR): host:port of the join rendezvous (trainer 0 listens)")
	case st.Width != 0 && st.Ranks%st.Width != 0:
		return bad("Storage.Ranks %d is not a multiple of Storage.Width %d", st.Ranks, st.Width)
	}
	if st.Token == "" {
		st.Token = st.Job
	}
	if st.ServeTimeout == 0 {
		st.ServeTimeout = DefaultServeTimeout
	}
	return nil
}

// joinRecord is what every rank of the join exchange sends first.
type joinRecord struct {
	peerInfo
	Role     string `json:"role"`
	Job      string `json:"job"`
	Trainers int    `json:"trainers"`
	Storage  int    `json:"storage"`
	Width    int    `json:"width"`
}

// joinVars is a storage rank's second record: its fabric address and the
// shards it holds (trainers send an empty one).
type joinVars struct {
	Addr []byte    `json:"addr,omitempty"`
	Vars []varMeta `json:"vars,omitempty"`
	Err  string    `json:"err,omitempty"`
}

// connectJoin opens the join exchange: trainers are ranks 0..T-1, storage
// rank i is T+i.
func (s *Store) connectJoin(rank, trainers int) error {
	st := &s.opts.Storage
	method := "tcp"
	jx, err := bootstrap.Connect(bootstrap.Options{Method: method, Addr: st.Addr, Token: st.Token,
		Timeout: s.opts.Bootstrap.Timeout,
		Env:     bootstrap.Env{Rank: rank, World: trainers + st.Ranks, LocalRank: s.localRank, Launcher: "join", Job: st.Job}})
	if err != nil {
		if r := fault.RanksOf(err); len(r) > 0 {
			return wrapf(nil, "Open", "", err, "join rendezvous %s of job %q (%s; ranks ≥ %d are storage ranks %s)",
				st.Addr, st.Job, fault.RankList(r), trainers, storageNames(r, trainers))
		}
		return wrapf(nil, "Open", "", err, "join rendezvous %s of job %q", st.Addr, st.Job)
	}
	s.jx = jx
	return nil
}

// storageNames names join ranks ≥ trainers as "storage rank i".
func storageNames(ranks []int, trainers int) string {
	var parts []string
	for _, r := range ranks {
		if r >= trainers {
			parts = append(parts, strconv.Itoa(r-trainers))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// joinGather all-gathers mine over the join exchange and decodes every
// record into out[r] (a slice of the join world's length).
func (s *Store) joinGather(tag string, mine any, decode func(r int, b []byte) error) error {
	b, err := json.Marshal(mine)
	if err != nil {
		return wrapf(ErrInvalid, "Open", "", err, "%s: encode", tag)
	}
	blobs, err := s.jx.AllGather(tag, b, s.opts.Bootstrap.Timeout)
	if err != nil {
		return wrapf(nil, "Open", "", err, "join %s", tag)
	}
	for r, blob := range blobs {
		if err := decode(r, blob); err != nil {
			return &Error{Op: "Open", Kind: ErrMismatch, Ranks: []int{r}, Detail: "bad join record " + tag, Err: err}
		}
	}
	return nil
}

// joinNodes is the "join-node" round of trainers and storage ranks: every
// one of the n ranks' records (joinGather), checked to agree (checkJoin).
func (s *Store) joinNodes(mine joinRecord, n int) ([]joinRecord, error) {
	recs := make([]joinRecord, n)
	if err := s.joinGather("join-node", mine, func(r int, b []byte) error { return json.Unmarshal(b, &recs[r]) }); err != nil {
		return nil, err
	}
	if err := checkJoin(recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// checkJoin returns an error naming the ranks whose job name or counts
// differ from rank 0's.
func checkJoin(recs []joinRecord) error {
	var bad []int
	for r, x := range recs {
		if x.Job != recs[0].Job || x.Trainers != recs[0].Trainers || x.Storage != recs[0].Storage || x.Width != recs[0].Width {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		x := recs[bad[0]]
		return &Error{Op: "Open", Kind: ErrMismatch, Ranks: bad, Detail: fmt.Sprintf(
			"join: job %q with %d trainers, %d storage ranks of width %d, rank 0 says job %q, %d, %d, %d",
			x.Job, x.Trainers, x.Storage, x.Width, recs[0].Job, recs[0].Trainers, recs[0].Storage, recs[0].Width)}
	}
	return nil
}

func nodeRecord(o *Options, id int) peerInfo {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	me := peerInfo{Host: host, BootID: strings.TrimSpace(string(boot)), Pid: os.Getpid()}
	me.Node = me.Host + "/" + me.BootID
	if o.NodeMode == NodeModeFabric {
		me.Node = fmt.Sprintf("%s/join%d", me.Node, id)
	}
	return me
}

// storedShard is one variable's shard on a storage rank.
type storedShard struct {
	own *shardFile
	exp *fabric.Export
}

// openStorageRole is Open for Role "storage": join the trainers, load the
// shards from Storage.Dir, export them, and tell the trainers where they
// are. The store then only serves (Serve, Close).
func (s *Store) openStorageRole() error {
	o := &s.opts
	st := &o.Storage
	if s.world != st.Ranks {
		return errf(ErrInvalid, "Open", "", "storage launch has %d ranks, Storage.Ranks says %d", s.world, st.Ranks)
	}
	width := st.Width
	if width == 0 {
		width = st.Ranks
	}
	// A storage rank talks to the trainers only (the join exchange): its
	// launch's own exchange closes first, while every storage rank is
	// alive and before the trainers can read, so that a storage rank that
	// dies later cannot fail the others.
	if err := s.closeExchange(); err != nil {
		return wrapf(nil, "Open", "", err, "storage launch's exchange")
	}
	T := st.Trainers
	s.nranks = T + st.Ranks
	s.health = placement.NewHealth(s.nranks, telemetry.Nanotime)
	empty := varMap{}
	s.vars.Store(&empty)
	id := T + s.rank
	if err := s.connectJoin(id, T); err != nil {
		return err
	}
	me := nodeRecord(o, id)
	mine := joinRecord{peerInfo: me, Role: RoleStorage, Job: st.Job, Trainers: T, Storage: st.Ranks, Width: width}
	recs, err := s.joinNodes(mine, T+st.Ranks)
	if err != nil {
		return err
	}
	needFabric := false
	for r := 0; r < T; r++ {
		needFabric = needFabric || recs[r].Node != me.Node
	}
	var localErr error
	var out joinVars
	if needFabric {
		if s.fab, localErr = fabric.Open(o.Fabric); localErr == nil {
			out.Addr = s.fab.Address()
		}
	}
	if localErr == nil {
		out.Vars, localErr = s.loadShards(st.Dir, s.rank%width)
	}
	if localErr != nil {
		out.Err = localErr.Error()
	}
	vars := make([]joinVars, T+st.Ranks)
	if err := s.joinGather("join-vars", out, func(r int, b []byte) error { return json.Unmarshal(b, &vars[r]) }); err != nil {
		return err
	}
	if localErr != nil {
		return localErr
	}
	for r, x := range vars {
		if x.Err != "" {
			return &Error{Op: "Open", Kind: ErrMismatch, Ranks: []int{r}, Detail: "join failed on rank " + strconv.Itoa(r) + ": " + x.Err}
		}
	}
	return nil
}

// loadShards loads member o's shard of every variable under dir.
func (s *Store) loadShards(dir string, o int) ([]varMeta, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, wrapf(ErrInvalid, "Open", "", err, "storage data directory")
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, errf(ErrInvalid, "Open", "", "storage data directory %s holds no variable directory", dir)
	}
	var metas []varMeta
	for seq, name := range names {
		dt, rowElems, rows, err := readShardFile(filepath.Join(dir, name), o)
		if err != nil {
			return nil, wrapf(nil, "Open", name, err, "storage rank %d (shard %d)", s.rank, o)
		}
		rb := int64(rowElems) * int64(dt.Size())
		f, err := createShard(s.opts.ShardDir, shardName(s.opts.Storage.Job+"-storage", s.rank, seq, name), name, int64(len(rows)))
		if err != nil {
			return nil, err
		}
		copy(f.data, rows)
		sh := storedShard{own: f}
		m := varMeta{Op: "storage", Name: name, DType: dt, RowElems: rowElems, RowBytes: rb,
			NLocal: int64(len(rows)) / rb, Path: f.path}
		if s.fab != nil {
			if sh.exp, err = s.fab.Export(f.mem); err != nil {
				f.close()
				return nil, wrapf(nil, "Open", name, err, "fabric export of %d bytes", len(f.mem))
			}
			m.Key, m.Base = sh.exp.Key(), sh.exp.Base()
		}
		s.stored = append(s.stored, sh)
		metas = append(metas, m)
	}
	return metas, nil
}

// Serve is what a storage rank does after Open: it serves reads (the
// fabric's progress thread answers them) until every trainer has closed
// the store, or Storage.ServeTimeout passes, then releases everything.
// It returns nil when the job closed normally. Only for Role "storage".
func (s *Store) Serve() error {
	if s.opts.Role != RoleStorage {
		return errf(ErrInvalid, "Serve", "", "Serve is for Role %q ranks", RoleStorage)
	}
	err := s.jx.Barrier("job-close", s.opts.Storage.ServeTimeout)
	// The trainers run no join collective between Open and Close, so an
	// abort that names only storage ranks comes at the trainers' Close:
	// another storage rank died during the job (its reads failed over),
	// and the job closed without it.
	if ranks := fault.RanksOf(err); err != nil && len(ranks) > 0 && ranks[0] >= s.opts.Storage.Trainers {
		err = nil
	}
	if err != nil {
		err = wrapf(nil, "Serve", "", err, "waiting for the job to close")
	}
	return errors.Join(err, s.Close())
}

// Role is the rank's role: "train" or "storage".
func (s *Store) Role() string {
	if s.opts.Role == RoleStorage {
		return RoleStorage
	}
	return RoleTrain
}

// errStorageCollective is the error of a collective on a storage rank.
func errStorageCollective() error {
	return errf(ErrInvalid, "collective", "", "a storage rank runs no collectives: it serves (Store.Serve) until the job closes")
}
